"""Source: ``orderedkafka`` vs Spark's ``format("kafka")`` reading the same topic.

Every run reads every record of one topic with Trigger.AvailableNow into the ``noop`` sink in
the same Spark session (local[2]). Runs alternate: ``orderedkafka`` with the native reader
(``reader=native``: Rust/librdkafka, Arrow buffers without a Python object per record), Spark's
JVM source, and ``orderedkafka`` with the confluent-kafka reader (``reader=python``, the
fallback). The medians are reported with, per run, the CPU seconds of the whole process tree
(driver, Spark's JVM, Python workers: psutil over live processes) per record and the tree's
peak RSS.

A second comparison times what the ordered stage consumes: the records of a batch as Arrow
inside Python tasks. Ours: ``emit=ranges`` rows, each task reading its range with the native
reader (``read_range``, as ``OrderedStateful`` does); Spark's: ``format("kafka")`` feeding
``mapInArrow`` (records cross the JVM into the Python worker). Both batch reads of the whole
topic, counting rows in the task; same alternation and medians.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa

from benchmarks.common import CaseContext, Result, RssSampler

RUNS = 3
SIDES = (("native", "orderedkafka", {"reader": "native"}),
         ("spark", "kafka", {}),
         ("python", "orderedkafka", {"reader": "python"}))


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


def _tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of this process and its live descendants, by pid."""
    import psutil

    me = psutil.Process()
    out = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _read_once(spark: Any, fmt: str, options: dict[str, str], ctx: CaseContext,
               topic: str) -> dict[str, float]:
    checkpoint = tempfile.mkdtemp(prefix=f"bench-{fmt}-", dir=ctx.workdir)
    reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", ctx.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    cpu_before = _tree_cpu()
    with RssSampler(0.25) as rss:
        started = time.perf_counter()
        query = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        seconds = time.perf_counter() - started
        cpu_after = _tree_cpu()
    cpu = sum(v - cpu_before.get(pid, 0.0) for pid, v in cpu_after.items())
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    return {"records_per_s": rows / seconds if rows else 0.0, "rows": rows,
            "cpu_us_per_record": cpu / rows * 1e6 if rows else 0.0,
            "peak_rss_mb": rss.peak_mb, "seconds": seconds}


def _count_ranges(batches: Any) -> Any:
    """mapInArrow over ``emit=ranges`` rows: read each range here, yield the record count."""
    from orderedstream.python_datasource.ranges import described
    from orderedstream.python_datasource.reader import read_range

    n = 0
    for batch in batches:
        for rng, options in described(batch):
            n += sum(b.num_rows for b in read_range(rng, options))
    yield pa.RecordBatch.from_pydict({"n": [n]}, schema=pa.schema([("n", pa.int64())]))


def _count_rows(batches: Any) -> Any:
    """mapInArrow over Kafka rows: count what reached the task."""
    n = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"n": [n]}, schema=pa.schema([("n", pa.int64())]))


def _in_tasks_once(spark: Any, side: str, ctx: CaseContext, topic: str) -> dict[str, float]:
    from pyspark.sql import functions as F

    reader = (spark.read.format("orderedkafka" if side == "ranges" else "kafka")
              .option("kafka.bootstrap.servers", ctx.bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    if side == "ranges":
        reader = reader.option("emit", "ranges").option("reader", "native")
    fn = _count_ranges if side == "ranges" else _count_rows
    cpu_before = _tree_cpu()
    with RssSampler(0.25) as rss:
        started = time.perf_counter()
        rows = reader.load().mapInArrow(fn, "n long").agg(F.sum("n")).collect()[0][0]
        seconds = time.perf_counter() - started
        cpu_after = _tree_cpu()
    cpu = sum(v - cpu_before.get(pid, 0.0) for pid, v in cpu_after.items())
    return {"records_per_s": rows / seconds if rows else 0.0, "rows": rows,
            "cpu_us_per_record": cpu / rows * 1e6 if rows else 0.0,
            "peak_rss_mb": rss.peak_mb, "seconds": seconds}


def _median(runs: list[dict[str, float]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def run(ctx: CaseContext) -> list[Result]:
    from pyspark import cloudpickle

    from orderedstream.dev.services.jars import spark_kafka_connector_jars
    from orderedstream.dev.services.spark import local_spark_session
    from orderedstream.python_datasource.consumers import native_unavailable_reason

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the mapInArrow functions
    if native_unavailable_reason() is not None:
        raise RuntimeError("the source benchmark needs the native reader: "
                           f"{native_unavailable_reason()}")
    records, partitions = ctx.scale["records"], ctx.scale["partitions"]
    topic = f"bench-source-{int(time.time())}"
    _produce(ctx, topic, records, partitions)
    spark = local_spark_session("bench-source", conf={
        "spark.jars": ",".join(spark_kafka_connector_jars())})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in SIDES}
    for _name, fmt, options in SIDES:  # warm-up: JIT, worker start, first connections
        _read_once(spark, fmt, options, ctx, topic)
    for _ in range(RUNS):
        for name, fmt, options in SIDES:
            runs[name].append(_read_once(spark, fmt, options, ctx, topic))
    tasks: dict[str, list[dict[str, float]]] = {"ranges": [], "kafka": []}
    for side in tasks:
        _in_tasks_once(spark, side, ctx, topic)
    for _ in range(RUNS):
        for side in tasks:
            tasks[side].append(_in_tasks_once(spark, side, ctx, topic))
    spark.stop()
    runs.update({f"tasks_{side}": side_runs for side, side_runs in tasks.items()})
    for name in runs:
        if any(r["rows"] != records for r in runs[name]):
            raise RuntimeError(f"{name} read {[r['rows'] for r in runs[name]]} rows, "
                               f"expected {records}")
    how = (f"{records:,} records of 100 B over {partitions} partitions, AvailableNow into noop, "
           f"local[2], median of {RUNS} alternating runs after one warm-up each")
    spark_name = "format('kafka') (spark-sql-kafka-0-10)"
    tasks_how = (f"{records:,} records of 100 B over {partitions} partitions, batch read of the "
                 "whole topic into Arrow batches inside mapInArrow tasks that count them, "
                 f"local[2], median of {RUNS} alternating runs after one warm-up each")
    extra = {f"{name}_{key}": [round(r[key], 2) for r in side]
             for name, side in runs.items()
             for key in ("records_per_s", "cpu_us_per_record", "peak_rss_mb")}
    extra["note"] = ("CPU: user+system seconds of the case process and its live descendants "
                     "(Spark's JVM, Python workers), sampled before and after each run")
    extra["python_reader_records_per_s"] = round(_median(runs["python"], "records_per_s"))
    extra["native_vs_python_reader"] = round(_median(runs["native"], "records_per_s")
                                             / _median(runs["python"], "records_per_s"), 2)
    return [
        Result("source", "read throughput (native reader)", "records/s",
               _median(runs["native"], "records_per_s"), _median(runs["spark"], "records_per_s"),
               spark_name, how, extra=extra),
        Result("source", "CPU per record, whole process tree (native reader)", "us",
               _median(runs["native"], "cpu_us_per_record"),
               _median(runs["spark"], "cpu_us_per_record"), spark_name, how,
               higher_is_better=False),
        Result("source", "peak RSS of the process tree (native reader)", "MiB",
               _median(runs["native"], "peak_rss_mb"), _median(runs["spark"], "peak_rss_mb"),
               spark_name, how, higher_is_better=False),
        Result("source", "read throughput (confluent-kafka reader)", "records/s",
               _median(runs["python"], "records_per_s"), _median(runs["spark"], "records_per_s"),
               spark_name, how),
        Result("source", "records as Arrow in Python tasks (emit=ranges, native reader)",
               "records/s", _median(runs["tasks_ranges"], "records_per_s"),
               _median(runs["tasks_kafka"], "records_per_s"),
               "format('kafka') + mapInArrow", tasks_how),
        Result("source", "CPU per record in Python tasks (emit=ranges, native reader)", "us",
               _median(runs["tasks_ranges"], "cpu_us_per_record"),
               _median(runs["tasks_kafka"], "cpu_us_per_record"),
               "format('kafka') + mapInArrow", tasks_how, higher_is_better=False),
    ]
