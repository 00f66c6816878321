"""Source: ``orderedkafka`` vs Spark's ``format("kafka")`` reading the same topic.

Both read every record of one topic with Trigger.AvailableNow into the ``noop`` sink in the same
Spark session (local[2]); runs alternate ours/Spark's and the median is reported.
"""

from __future__ import annotations

import statistics
import tempfile
import time

from benchmarks.common import CaseContext, Result

RUNS = 3


def _produce(ctx: CaseContext, topic: str, records: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": ctx.bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000, "compression.type": "lz4"})
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % (i % 10007), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("benchmark data was not fully delivered")


def _read_once(spark, fmt: str, ctx: CaseContext, topic: str) -> float:
    checkpoint = tempfile.mkdtemp(prefix=f"bench-{fmt}-")
    df = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", ctx.bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    started = time.perf_counter()
    query = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    return rows / seconds if rows else 0.0


def run(ctx: CaseContext) -> list[Result]:
    from orderedstream.dev.services.jars import spark_kafka_connector_jars
    from orderedstream.dev.services.spark import local_spark_session

    records, partitions = ctx.scale["records"], ctx.scale["partitions"]
    topic = f"bench-source-{int(time.time())}"
    _produce(ctx, topic, records, partitions)
    spark = local_spark_session("bench-source", conf={
        "spark.jars": ",".join(spark_kafka_connector_jars())})
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(RUNS):
        ours.append(_read_once(spark, "orderedkafka", ctx, topic))
        theirs.append(_read_once(spark, "kafka", ctx, topic))
    spark.stop()
    how = (f"{records:,} records of 100 B over {partitions} partitions, AvailableNow into noop, "
           f"local[2], median of {RUNS} alternating runs")
    return [Result("source", "read throughput", "records/s", statistics.median(ours),
                   statistics.median(theirs), "format('kafka') (spark-sql-kafka-0-10)", how,
                   extra={"ours_runs": [round(x) for x in ours],
                          "spark_runs": [round(x) for x in theirs]})]
