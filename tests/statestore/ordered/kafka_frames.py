"""Test helper: a batch DataFrame of Kafka records with one Spark partition per Kafka partition,
rows in offset order, in Spark's Kafka schema: what ``orderedkafka`` hands ``foreachBatch``.

A minimal Python Data Source (``orderedtestkafka``) over confluent-kafka; it stands in for the
``orderedkafka`` source while that one is being built, and is only used by these tests.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
             "timestamp timestamp, timestampType int")
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())])
BATCH_ROWS = 10_000


class _Range(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.bootstrap = options["bootstrap"]
        self.topic = options["topic"]
        self.ranges = {int(k): tuple(v) for k, v in json.loads(options["ranges"]).items()}

    def partitions(self) -> list[InputPartition]:
        return [_Range(self.topic, p, s, e) for p, (s, e) in sorted(self.ranges.items())]

    def read(self, partition: _Range) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        if partition.end <= partition.start:
            return
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "ordered-tests",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        consumer.assign([TopicPartition(partition.topic, partition.partition, partition.start)])
        cols: dict[str, list[Any]] = {n: [] for n in ARROW_SCHEMA.names}
        try:
            last = partition.start - 1
            deadline = time.monotonic() + 120
            error = None  # the last consumer error other than reaching the log's end
            while last < partition.end - 1:
                if time.monotonic() > deadline:
                    marks = consumer.get_watermark_offsets(
                        TopicPartition(partition.topic, partition.partition), timeout=5)
                    raise TimeoutError(f"{partition.topic}/{partition.partition}: offsets up to "
                                       f"{partition.end - 1} not readable (last {last}; last "
                                       f"consumer error: {error}; watermarks: {marks})")
                msgs = consumer.consume(5000, timeout=5.0)
                for msg in msgs:
                    if msg.error() is not None:
                        if msg.error().code() != KafkaError._PARTITION_EOF:
                            error = msg.error()
                        continue
                    if msg.offset() >= partition.end:
                        last = partition.end
                        break
                    ts_type, ts = msg.timestamp()
                    cols["key"].append(msg.key())
                    cols["value"].append(msg.value())
                    cols["topic"].append(msg.topic())
                    cols["partition"].append(msg.partition())
                    cols["offset"].append(msg.offset())
                    cols["timestamp"].append(ts * 1000)
                    cols["timestampType"].append(ts_type - 1 if ts_type > 0 else -1)
                    last = msg.offset()
                    if len(cols["offset"]) >= BATCH_ROWS:
                        yield _batch(cols)
                        cols = {n: [] for n in ARROW_SCHEMA.names}
            if cols["offset"]:
                yield _batch(cols)
        finally:
            consumer.close()


def _batch(cols: dict[str, list[Any]]) -> pa.RecordBatch:
    arrays = [pa.array(cols[f.name], type=pa.int64() if f.name == "timestamp" else f.type)
              for f in ARROW_SCHEMA]
    arrays[5] = arrays[5].cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class OrderedTestKafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "orderedtestkafka"

    def schema(self) -> str:
        return KAFKA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(self.options)


def kafka_batch(spark: Any, bootstrap: str, topic: str,
                ranges: Mapping[int, tuple[int, int]]) -> Any:
    """Records ``[start, end)`` of each Kafka partition as a DataFrame, one Spark partition
    per Kafka partition, in offset order."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(OrderedTestKafkaSource)
    return (spark.read.format("orderedtestkafka").option("bootstrap", bootstrap)
            .option("topic", topic)
            .option("ranges", json.dumps({str(p): list(r) for p, r in ranges.items()})).load())
