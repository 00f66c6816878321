"""End to end through Spark against the real broker: order over large batches, exactly-once
across restarts (with a replayed batch), discovery, integrity tiers, batch reads, option errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from orderedstream.dev.services.process import wait_until
from tests.python_datasource.source_helpers import (
    assert_ordered_one_task,
    keyed,
    offsets_log,
    run_available_now,
    stream,
)


def produce_spread(kafka: Any, name: str, partitions: int, per_partition: int) -> None:
    producer = kafka.producer(linger_ms=20, batch_num_messages=10000)
    for i in range(per_partition):
        for p in range(partitions):
            while True:
                try:
                    producer.produce(name, value=b"%d" % i, partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


@pytest.mark.parametrize("per_partition", [
    37_500, pytest.param(500_000, marks=pytest.mark.slow)])
def test_order_per_partition_over_large_batches(spark: Any, kafka: Any, topic: Any,
                                                tmp_path: Path, per_partition: int,
                                                reader: str) -> None:
    name = topic(partitions=8)
    produce_spread(kafka, name, 8, per_partition)
    df = stream(spark, kafka.bootstrap, subscribe=name, startingOffsets="earliest",
                reader=reader)
    tables, _ = run_available_now(df, tmp_path / "cp")
    assert sum(t.num_rows for t in tables) == 8 * per_partition
    assert_ordered_one_task(tables)
    rows = keyed(tables)
    assert len(set(rows)) == len(rows)


def test_exactly_once_across_restarts_and_a_replayed_batch(spark: Any, kafka: Any, topic: Any,
                                                           tmp_path: Path, reader: str) -> None:
    """Parquet sink + checkpoint: stop, lose the last commit (a crash before Spark committed
    batch N), produce more, restart: every offset lands exactly once."""
    name = topic(partitions=3)
    for p in range(3):
        kafka.produce(name, [(None, b"a%d" % i) for i in range(100)], partition=p)
    out, cp = tmp_path / "out", tmp_path / "cp"

    def run() -> None:
        df = stream(spark, kafka.bootstrap, subscribe=name, startingOffsets="earliest",
                    maxOffsetsPerTrigger=90, reader=reader)
        q = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(cp)).trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None

    run()
    logged = offsets_log(cp)
    assert len(logged) == 4  # 300 records, 90 per trigger, split by backlog
    last = max(int(p.name) for p in (cp / "commits").glob("[0-9]*"))
    (cp / "commits" / str(last)).unlink()
    (cp / "commits" / f".{last}.crc").unlink(missing_ok=True)
    for p in range(3):
        kafka.produce(name, [(None, b"b%d" % i) for i in range(50)], partition=p)
    run()
    assert offsets_log(cp)[:len(logged)] == logged  # the replay used the logged offsets
    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(p, o) for p in range(3) for o in range(150)]


def test_pattern_picks_up_new_topics_and_partitions(spark: Any, kafka: Any, topic: Any,
                                                    tmp_path: Path) -> None:
    prefix = topic(partitions=1, prefix="sessions")
    first = f"{prefix}-a"
    kafka.create_topic(first, 1)
    kafka.produce(first, [(None, b"x")] * 5)
    cp = tmp_path / "cp"

    def run() -> list[pa.Table]:
        df = stream(spark, kafka.bootstrap, subscribePattern=f"{prefix}-.*",
                    startingOffsets="earliest")
        return run_available_now(df, cp)[0]

    assert sorted(keyed(run())) == [(first, 0, i) for i in range(5)]
    kafka.add_partitions(first, 2)
    kafka.produce(first, [(None, b"y")] * 3, partition=1)
    second = f"{prefix}-b"
    kafka.create_topic(second, 1)
    kafka.produce(second, [(None, b"z")] * 4)
    assert sorted(keyed(run())) == sorted([(first, 1, i) for i in range(3)]
                                          + [(second, 0, i) for i in range(4)])


def test_compacted_topic_gaps_pass_strict(spark: Any, kafka: Any, topic: Any,
                                          tmp_path: Path, reader: str) -> None:
    name = topic(partitions=1, cleanup_policy="compact", segment_ms="100",
                 min_cleanable_dirty_ratio="0.01", delete_retention_ms="100")
    for round_ in range(5):
        kafka.produce(name, [(f"k{i}", f"{round_}") for i in range(20)])

    def compacted() -> bool:
        kafka.produce(name, [(f"roll-{compacted.calls}", "r")])  # rolls the active segment
        compacted.calls += 1
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "probe",
                             "enable.partition.eof": True})
        consumer.assign([TopicPartition(name, 0, 0)])
        first = None
        while first is None:
            msg = consumer.poll(10)
            first = msg.offset() if msg is not None else -1
        consumer.close()
        return first > 0 or first == -1

    compacted.calls = 0  # type: ignore[attr-defined]
    wait_until(compacted, 120, f"compaction of {name}")
    df = stream(spark, kafka.bootstrap, subscribe=name, startingOffsets="earliest",
                reader=reader)
    tables, _ = run_available_now(df, tmp_path / "cp")
    table = pa.concat_tables(tables)
    offsets = table["offset"].to_pylist()
    assert offsets == sorted(offsets) and len(offsets) < offsets[-1] + 1  # gaps, in order
    latest = {k.decode(): v.decode() for k, v in zip(table["key"].to_pylist(),
                                                     table["value"].to_pylist())}
    assert all(latest[f"k{i}"] == "4" for i in range(20))


def test_retention_loss_strict_fails_window_reports_in_progress(spark: Any, kafka: Any,
                                                                topic: Any, tmp_path: Path,
                                                                reader: str) -> None:
    name = topic(partitions=1)
    kafka.produce(name, [(None, b"%d" % i) for i in range(10)])
    cp = tmp_path / "cp"
    run_available_now(stream(spark, kafka.bootstrap, subscribe=name,
                             startingOffsets="earliest", reader=reader), cp)
    kafka.produce(name, [(None, b"%d" % i) for i in range(10, 20)])
    kafka.admin().delete_records([TopicPartition(name, 0, 15)])[
        TopicPartition(name, 0, 15)].result(30)
    with pytest.raises(Exception, match=rf"{name}-0 offsets \[10, 15\)"):
        run_available_now(stream(spark, kafka.bootstrap, subscribe=name, reader=reader), cp)
    tables, query = run_available_now(
        stream(spark, kafka.bootstrap, subscribe=name, integrity="window", reader=reader), cp)
    assert sorted(keyed(tables)) == [(name, 0, i) for i in range(15, 20)]
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress]
    assert {"events": 1, "records": 5} in [e["loss"] for e in ends]
    latest = [p["sources"][0].get("latestOffset") for p in query.recentProgress]
    assert any(x and json.loads(x)["offsets"] == {name: {"0": 20}} for x in latest)


def test_batch_read_between_offsets(spark: Any, kafka: Any, topic: Any) -> None:
    name = topic(partitions=2)
    for p in range(2):
        kafka.produce(name, [(None, b"%d" % i) for i in range(40)], partition=p)
    df = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
          .option("subscribe", name)
          .option("startingOffsets", json.dumps({name: {"0": 5, "1": -2}}))
          .option("endingOffsets", json.dumps({name: {"0": 25, "1": -1}})).load())
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 25)] + [(1, o) for o in range(40)]
    everything = (spark.read.format("orderedkafka")
                  .option("kafka.bootstrap.servers", kafka.bootstrap)
                  .option("subscribe", name).load())
    assert everything.count() == 80
    # nothing to read (an empty topic, an empty range, both emit modes): no rows, as Spark's
    # Kafka source gives, not pyspark's stand-in partition refused
    empty = topic(partitions=1)
    for emit in ("records", "ranges"):
        for source, options in ((empty, {}), (name, {
                "startingOffsets": json.dumps({name: {"0": 7, "1": 3}}),
                "endingOffsets": json.dumps({name: {"0": 7, "1": 3}})})):
            reader = (spark.read.format("orderedkafka").option("emit", emit)
                      .option("kafka.bootstrap.servers", kafka.bootstrap)
                      .option("subscribe", source))
            for key, value in options.items():
                reader = reader.option(key, value)
            assert reader.load().collect() == [], (emit, source)


def test_emit_ranges_describes_each_range_and_reads_the_same_records(spark: Any, kafka: Any,
                                                                     topic: Any) -> None:
    """``emit=ranges``: one row per task's range; reading the described ranges gives exactly
    the records ``emit=records`` gives, in offset order."""
    from orderedstream.python_datasource.ranges import described
    from orderedstream.python_datasource.reader import read_range

    name = topic(partitions=2)
    for p in range(2):
        kafka.produce(name, [(b"k", b"%d" % i) for i in range(30 + p)], partition=p)
    reader = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", name).option("startingOffsets", json.dumps({name: {"0": 4,
                                                                                    "1": -2}})))
    ranges = reader.option("emit", "ranges").load()
    assert ranges.columns == ["topic", "partition", "startOffset", "endOffset", "reader"]
    rows = sorted(ranges.collect(), key=lambda r: r.partition)
    assert [(r.topic, r.partition, r.startOffset, r.endOffset) for r in rows] == [
        (name, 0, 4, 30), (name, 1, 0, 31)]
    assert ranges.rdd.getNumPartitions() == 2
    table = pa.Table.from_pydict({"reader": [bytes(r.reader) for r in rows]})
    read = [(b["partition"][i].as_py(), b["offset"][i].as_py())
            for rng, options in described(table.to_batches()[0])
            for b in read_range(rng, options) for i in range(b.num_rows)]
    records = reader.option("emit", "records").load().select("partition", "offset").collect()
    assert read == sorted((r.partition, r.offset) for r in records)


def test_range_partitions_put_the_same_range_rows_in_fewer_tasks(spark: Any, kafka: Any,
                                                                 topic: Any) -> None:
    """``rangePartitions`` = n: the same range rows (same ranges, same reader options), in at
    most n input partitions instead of one per Kafka partition."""
    from orderedstream.python_datasource.ranges import described

    name = topic(partitions=3)
    for p in range(3):
        kafka.produce(name, [(b"k", b"%d" % i) for i in range(10 + p)], partition=p)
    reader = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", name).option("emit", "ranges"))

    def ranges(frame: Any) -> list[tuple[str, int, int, int]]:
        rows = frame.collect()
        table = pa.Table.from_pydict({"reader": [bytes(r.reader) for r in rows]})
        assert [(r.topic, r.partition, r.startOffset, r.endOffset) for r in rows] == [
            (rng.topic, rng.partition, rng.start, rng.end)
            for rng, _ in described(table.to_batches()[0])]
        return sorted((r.topic, r.partition, r.startOffset, r.endOffset) for r in rows)

    each = reader.load()
    assert each.rdd.getNumPartitions() == 3
    expected = [(name, p, 0, 10 + p) for p in range(3)]
    assert ranges(each) == expected
    for groups, tasks in (("1", 1), ("2", 2), ("8", 3)):
        grouped = reader.option("rangePartitions", groups).load()
        assert grouped.rdd.getNumPartitions() == tasks
        assert ranges(grouped) == expected


@pytest.mark.parametrize("option,value,message", [
    ("startingOfsets", "earliest", "unknown option 'startingofsets'.*accepted are"),
    ("kafka.auto.offset.reset", "earliest", "kafka.auto.offset.reset.*startingOffsets"),
    ("integrity", "paranoid", "'strict', 'window' or 'none'"),
    ("minPartitions", "4", "minPartitions.*integrity 'none'"),
    ("includeHeaders", "yes", "includeHeaders.*'true' or 'false'"),
])
def test_bad_options_fail_at_load(spark: Any, option: str, value: str, message: str) -> None:
    """``load()`` runs the source's ``schema()`` on the driver: a bad option fails there, as
    our OptionError naming the option and what it accepts (no broker is contacted)."""
    for reader in (spark.readStream, spark.read):
        configured = (reader.format("orderedkafka").option("kafka.bootstrap.servers", "h:1")
                      .option("subscribe", "any-topic").option(option, value))
        with pytest.raises(Exception, match=f"OptionError.*{message}"):
            configured.load()


def test_mode_rules_fail_when_the_query_starts(spark: Any, kafka: Any, tmp_path: Path) -> None:
    """Spark does not tell ``load()`` whether a batch or a streaming read follows: the rules of
    one mode apply when Spark asks for that mode's reader."""
    df = stream(spark, kafka.bootstrap, subscribe="any-topic", endingOffsets="latest")
    with pytest.raises(Exception, match="endingOffsets.*batch") as failed:
        run_available_now(df, tmp_path / "cp")
    # refused by the first planning call, not by pyspark's runner (whose error path then
    # added "UnboundLocalError: cannot access local variable 'reader'" as the last line)
    assert "UnboundLocalError" not in str(failed.value)
    batch = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", "any-topic").option("startingOffsets", "latest").load())
    with pytest.raises(Exception, match="startingOffsets.*not 'latest'"):
        batch.collect()


def test_planning_errors_show_the_reason_first(spark: Any, kafka: Any, topic: Any,
                                               tmp_path: Path) -> None:
    """Errors found while Spark plans offsets (a start beyond the log end, a kafka.* setting
    the client refuses) carry one short frame: the pack's sentence within
    Spark's first 200 characters for a batch read, after only pyspark's runner frames for a
    stream."""
    name = topic(partitions=1)
    kafka.produce(name, [(None, b"x")] * 3)
    cases = [({"startingOffsets": f'{{"{name}": {{"0": 50}}}}'},
              f"OptionError: option 'startingOffsets': offset 50 for {name}-0 is beyond"),
             ({"kafka.security.protocol": "FOO"},
              "OptionError: a kafka.* option was refused by the Kafka client")]
    for options, sentence in cases:
        batch = (spark.read.format("orderedkafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name))
        for key, value in options.items():
            batch = batch.option(key, value)
        with pytest.raises(Exception) as failed:
            batch.load().collect()
        text = str(failed.value)
        assert sentence in text and text.index(sentence) < 200, text[:1500]
        assert len(text.splitlines()) <= 5, text[:1500]
        with pytest.raises(Exception) as failed:
            run_available_now(stream(spark, kafka.bootstrap, subscribe=name, **options),
                              tmp_path / f"cp-{len(sentence)}")
        text = str(failed.value)
        assert sentence in text and text.index(sentence) < 800, text[:1500]
        before = text[:text.index(sentence)]
        assert "python_datasource/" not in before, text[:1500]  # none of the pack's frames
