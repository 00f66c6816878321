"""Streaming reads against the real broker: schema, values, order, registration by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.python_datasource.source_helpers import (
    assert_ordered_one_task,
    keyed,
    offsets_log,
    run_available_now,
    stream,
)


def test_reads_every_record_in_order_by_name(spark: Any, kafka: Any, topic: Any,
                                             tmp_path: Path) -> None:
    """format("orderedkafka") works without register (static registration); each partition is
    read by one task in offset order; values, keys and offsets are Kafka's."""
    name = topic(partitions=3)
    for p in range(3):
        kafka.produce(name, [(f"k{p}-{i}", f"v{p}-{i}") for i in range(50)], partition=p)
    df = stream(spark, kafka.bootstrap, subscribe=name, startingOffsets="earliest")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    tables, _ = run_available_now(df, tmp_path / "cp")
    rows = keyed(tables)
    assert sorted(rows) == [(name, p, i) for p in range(3) for i in range(50)]
    assert len(rows) == len(set(rows))
    assert_ordered_one_task(tables)
    values = {(t, p, o): (k, v) for tb in tables for t, p, o, k, v in zip(
        tb["topic"].to_pylist(), tb["partition"].to_pylist(), tb["offset"].to_pylist(),
        tb["key"].to_pylist(), tb["value"].to_pylist())}
    assert values[(name, 2, 7)] == (b"k2-7", b"v2-7")
    last = offsets_log(tmp_path / "cp")[-1]
    assert last["offsets"] == {name: {"0": 50, "1": 50, "2": 50}}
    assert set(last["topicIds"]) == {name}


def test_explicit_register_and_headers(spark: Any, kafka: Any, topic: Any,
                                       tmp_path: Path, reader: str) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    name = topic(partitions=1)
    kafka.produce(name, [(b"k", b"v")], headers=[("trace", b"t1")])
    df = stream(spark, kafka.bootstrap, subscribe=name, startingOffsets="earliest",
                includeHeaders="true", reader=reader)
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows: list[Any] = []
    query = (df.writeStream.foreachBatch(lambda b, _: rows.extend(b.collect()))
             .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp"))
             .start())
    query.awaitTermination()
    assert [(r.key, r.value, r.offset, [tuple(h) for h in r.headers]) for r in rows] == \
        [(b"k", b"v", 0, [("trace", b"t1")])]
    assert rows[0].timestampType == 0 and rows[0].timestamp is not None
