"""A smoke pipeline through the real services: Kafka -> Spark (one task per partition) -> S3.

Used by ``orderedstream demo`` until the main job lands: it proves the three services and the
wiring between them work on this machine, and says what it did.
"""

from __future__ import annotations

import time
from typing import Any

from orderedstream.services.embedded import Endpoints


def run_smoke(endpoints: Endpoints, spark: Any, records: int = 30000, partitions: int = 3,
              out=print) -> dict[str, Any]:
    """Produce ``records`` keyed records, read each partition in one Spark task, land Parquet."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import s3fs
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"smoke-{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": endpoints.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": endpoints.bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"session-{i % 97}".encode(), value=f"{i}".encode())
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)
    out(f"produced {records} records to {topic} ({partitions} partitions) "
        f"in {time.monotonic() - started:.1f}s")

    bootstrap = endpoints.bootstrap

    def read_partition(index: int, _rows: Any) -> Any:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "smoke",
                             "enable.auto.commit": False})
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, index), timeout=10)
        consumer.assign([TopicPartition(topic, index, low)])
        last, count, ordered = -1, 0, True
        while last + 1 < high:
            for msg in consumer.consume(1000, 2.0):
                if msg.error():
                    continue
                ordered &= msg.offset() > last
                last = msg.offset()
                count += 1
        consumer.close()
        yield (index, count, ordered)

    started = time.monotonic()
    rows = (spark.sparkContext.parallelize(range(partitions), partitions)
            .mapPartitionsWithIndex(read_partition).collect())
    out(f"Spark read {sum(r[1] for r in rows)} records, one task per partition, in offset order: "
        f"{all(r[2] for r in rows)} ({time.monotonic() - started:.1f}s)")

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **endpoints.storage_options)
    table = pa.table({"partition": [r[0] for r in rows], "records": [r[1] for r in rows]})
    path = f"lake/smoke/{topic}"
    ds.write_dataset(table, path, format="parquet", filesystem=fs)
    back = ds.dataset(path, format="parquet", filesystem=fs).to_table()
    out(f"wrote per-partition counts as Parquet to s3://{path} on {endpoints.s3_endpoint} "
        f"and read back {back.num_rows} rows")
    total = sum(back.column("records").to_pylist())
    if total != records or not all(r[2] for r in rows):
        raise RuntimeError(f"smoke check failed: {total} of {records} records came back")
    return {"topic": topic, "records": total, "partitions": partitions}
