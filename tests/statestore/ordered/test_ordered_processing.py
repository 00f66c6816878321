"""Ordered stateful processing against real Kafka, real S3 (SeaweedFS) and real Spark (local[2]).

Each test feeds ``OrderedStateful.process_batch`` the DataFrame a ``foreachBatch`` would get:
one Spark partition per Kafka partition range, rows in offset order (``kafka_frames``).
"""

from __future__ import annotations

import collections
import sys
import time
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from orderedstream.core.errors import FencedError, OrderViolationError
from orderedstream.statestore.ordered import (
    EventTimeTimeout,
    OrderedStateful,
    ProcessingTimeTimeout,
)
from orderedstream.statestore.ordered.runner import OrderedTask
from tests.statestore.ordered.kafka_frames import kafka_batch
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

# The user functions below travel to executors by value (this module is not importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _produce_sequences(kafka: Any, name: str, keys: int, per_key: int) -> dict[int, int]:
    records = ((f"k{i % keys}".encode(), str(i // keys).encode()) for i in range(keys * per_key))
    assert kafka.produce(name, records) == keys * per_key
    return kafka.end_offsets(name)


def _processor(s3: Any, url: str, func: Any, schema: str, tmp_path: Any,
               store: dict[str, Any] | None = None, **kwargs: Any) -> OrderedStateful:
    return OrderedStateful(func, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema=schema, storage_options=s3.storage_options,
                           store_options={"local_dir": str(tmp_path / "local"), **(store or {})},
                           **kwargs)


def test_order_holds_for_a_large_batch_under_cache_pressure(spark, kafka, topic, s3, s3_url,
                                                            tmp_path) -> None:
    name = topic(partitions=4)
    keys, per_key = 2000, 150  # 300k records over 4 partitions
    ends = _produce_sequences(kafka, name, keys, per_key)
    assert sum(ends.values()) == keys * per_key
    # A small key cache forces constant eviction through the store (memory pressure).
    proc = _processor(s3, s3_url, check_order, ORDER_SCHEMA, tmp_path, max_cached_keys=300)
    half = {p: (0, end // 2) for p, end in ends.items()}
    rest = {p: (end // 2, end) for p, end in ends.items()}
    first = proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, half), 0)
    second = proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, rest), 1)

    assert not first.skipped and not second.skipped
    assert first.records + second.records == keys * per_key
    out = proc.table().to_arrow()
    assert out.num_rows == keys * per_key
    assert pc.sum(out["violation"]).as_py() == 0  # order violations: none
    coords = set(zip(out["partition"].to_pylist(), out["offset"].to_pylist(), strict=True))
    assert len(coords) == keys * per_key  # every record exactly once
    # State: every key ends at its last sequence number, in the partition Kafka put it in.
    final: dict[bytes, int] = {}
    for partition in ends:
        for key, value in proc.read_state(name, partition):
            assert key not in final
            final[key] = value
    assert final == {f"k{i}".encode(): per_key - 1 for i in range(keys)}
    states = proc.partition_states()
    assert sorted(states) == [f"{name}/{p}" for p in sorted(ends)]
    assert all(states[f"{name}/{p}"].last_offset == end - 1 for p, end in ends.items())


def test_shuffled_input_is_refused_before_anything_is_committed(spark, kafka, topic, s3,
                                                                 s3_url, tmp_path) -> None:
    name = topic(partitions=2)
    ends = _produce_sequences(kafka, name, keys=50, per_key=40)
    proc = _processor(s3, s3_url, check_order, ORDER_SCHEMA, tmp_path)
    frame = kafka_batch(spark, kafka.bootstrap, name, {p: (0, e) for p, e in ends.items()})
    with pytest.raises(Exception) as info:
        proc.process_batch(frame.repartition(3), 0)  # a shuffle: order and grouping are lost
    text = str(info.value)
    assert "OrderViolationError" in text or isinstance(info.value, OrderViolationError)
    assert proc.log.get(0) is None
    assert proc.table().to_arrow().num_rows == 0


def test_processing_time_timeouts_fire_for_idle_keys_and_idle_partitions(
        spark, kafka, topic, s3, s3_url, tmp_path) -> None:
    name = topic(partitions=2)
    producer = kafka.producer()
    for key in ("a", "b", "c"):
        producer.produce(name, key=key, value=b"1", partition=0)
    for key in ("x", "y"):
        producer.produce(name, key=key, value=b"1", partition=1)
    assert producer.flush(30) == 0

    def sessions(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
        if state.has_timed_out:
            count = state.get()
            state.remove()
            return [(key.decode(), "closed", count)]
        count = state.get_option(0) + 1
        state.update(count)
        state.set_timeout_duration(1)  # 1 ms: due at the next batch
        return [(key.decode(), "open", count)]

    proc = _processor(s3, s3_url, sessions, "key string, event string, count int", tmp_path,
                      timeout=ProcessingTimeTimeout())
    proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, {0: (0, 3), 1: (0, 2)}), 0)
    states = proc.partition_states()
    assert all(base.next_timeout_ms is not None for base in states.values())

    producer.produce(name, key="a", value=b"2", partition=0)
    assert producer.flush(30) == 0
    # Batch 1 has one record of key "a" in partition 0 and nothing for partition 1.
    result = proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, {0: (3, 4)}), 1)
    rows = proc.table().to_arrow(result.record.version).to_pylist()
    batch1 = [r for r in rows if r["event"] == "closed" or r["count"] == 2]
    assert sorted((r["key"], r["event"], r["count"]) for r in batch1) == [
        ("a", "open", 2), ("b", "closed", 1), ("c", "closed", 1), ("x", "closed", 1),
        ("y", "closed", 1)]
    assert dict(proc.read_state(name, 0)) == {b"a": 2}
    assert dict(proc.read_state(name, 1)) == {}
    assert {c.partition_id: c.timeouts for c in result.commits} == {f"{name}/0": 2,
                                                                    f"{name}/1": 2}


def test_event_time_timeouts_follow_the_partition_watermark(spark, kafka, topic, s3, s3_url,
                                                            tmp_path) -> None:
    name = topic(partitions=1)
    base_ms = (int(time.time()) - 3600) * 1000  # recent: old timestamps meet retention
    producer = kafka.producer()
    for key, at in (("a", 0), ("b", 2_000), ("a", 4_000), ("c", 9_000)):
        producer.produce(name, key=key, value=b"v", partition=0, timestamp=base_ms + at)
    assert producer.flush(30) == 0

    def idle_after_10s(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
        if state.has_timed_out:
            state.remove()
            return [(key.decode(), "timeout", state.get_current_watermark_ms())]
        event_ms = int(record["timestamp"].timestamp() * 1000)
        state.update(event_ms)
        state.set_timeout_timestamp(event_ms + 10_000)
        return [(key.decode(), "seen", event_ms)]

    proc = _processor(s3, s3_url, idle_after_10s, "key string, event string, at long",
                      tmp_path, timeout=EventTimeTimeout("3 seconds"))
    proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, {0: (0, 4)}), 0)
    # Watermark 9s - 3s = 6s: no key idles past 10s of event time yet.
    assert [r["event"] for r in proc.table().to_arrow().to_pylist()] == ["seen"] * 4
    assert proc.partition_states()[f"{name}/0"].max_event_ms == base_ms + 9_000

    producer.produce(name, key="c", value=b"v", partition=0, timestamp=base_ms + 17_000)
    assert producer.flush(30) == 0
    result = proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, {0: (4, 5)}), 1)
    # Watermark 17s - 3s = 14s > a's timeout (4s + 10s = 14s)? no: equal does not fire;
    # b's (12s) fires; c was refreshed (27s).
    rows = proc.table().to_arrow(result.record.version).to_pylist()[4:]
    assert sorted((r["key"], r["event"]) for r in rows) == [("b", "timeout"), ("c", "seen")]
    assert [r["at"] for r in rows if r["event"] == "timeout"] == [base_ms + 14_000]
    assert sorted(dict(proc.read_state(name, 0))) == [b"a", b"c"]


@pytest.mark.parametrize("snapshots", ["checkpoint", "changelog"])
def test_replay_after_a_crash_commits_output_and_state_exactly_once(spark, kafka, topic, s3,
                                                                    s3_url, tmp_path,
                                                                    snapshots) -> None:
    # changelog: batch 0 is a checkpoint, batches 1 and 2 upload logs; state read at batch 2
    # replays both.
    store = {"changelog": True, "snapshot_interval": 3} if snapshots == "changelog" else {}
    name = topic(partitions=2)
    ends = _produce_sequences(kafka, name, keys=300, per_key=60)
    thirds = [{p: (e * i // 3, e * (i + 1) // 3) for p, e in ends.items()} for i in range(3)]

    def frames(i: int) -> Any:
        return kafka_batch(spark, kafka.bootstrap, name, thirds[i])

    crashed = _processor(s3, s3_url, check_order, ORDER_SCHEMA, tmp_path, store)
    crashed.process_batch(frames(0), 0)
    # Batch 1 runs its ordered stage (files and state candidates are written) and the
    # driver dies before the commit record: what a crash leaves behind.
    plan_bases = crashed.partition_states()
    from orderedstream.statestore.ordered.plan import BatchPlan

    task = OrderedTask(crashed.options, check_order, BatchPlan(1, 0, plan_bases), crashed.sink)
    orphans = frames(1).mapInArrow(task, "commit string").collect()
    assert len(orphans) == 2
    assert crashed.log.get(1) is None

    # The query restarts: a new processor (new writer epoch) gets batch 1 again, then 2.
    restarted = _processor(s3, s3_url, check_order, ORDER_SCHEMA, tmp_path, store)
    replay = restarted.process_batch(frames(1), 1)
    assert not replay.skipped
    again = restarted.process_batch(frames(1), 1)  # Spark replays it once more: skipped
    assert again.skipped and again.record == replay.record
    restarted.process_batch(frames(2), 2)
    with pytest.raises(FencedError):  # the dead run's driver, if it woke up, cannot commit
        crashed.process_batch(frames(2).limit(0), 3)

    out = restarted.table().to_arrow()
    total = sum(ends.values())
    assert out.num_rows == total
    assert pc.sum(out["violation"]).as_py() == 0
    assert len(set(zip(out["partition"].to_pylist(), out["offset"].to_pylist(),
                       strict=True))) == total
    # Same state as a run that never crashed.
    clean = _processor(s3, f"{s3_url}-clean", check_order, ORDER_SCHEMA, tmp_path / "clean",
                       store)
    for i in range(3):
        clean.process_batch(frames(i), i)
    for partition in ends:
        assert dict(restarted.read_state(name, partition)) == dict(clean.read_state(name,
                                                                                   partition))
    assert collections.Counter(clean.table().to_arrow()["offset"].to_pylist()) == \
        collections.Counter(out["offset"].to_pylist())
    if snapshots == "changelog":
        chains = {c.partition_id: c.metrics["state"]["changelog"] for c in replay.commits}
        assert set(chains.values()) == {True}, chains  # batch 1: a log


@pytest.mark.slow
def test_state_written_as_checkpoints_and_as_logs_reads_back_across_a_mode_switch(
        spark, kafka, topic, s3, s3_url, tmp_path) -> None:
    """The main job's default moved to changelog snapshots: a job restarted with the other
    mode (``orderedstream run --state-snapshots``) continues from the state the first wrote,
    both ways, and ends with the state of a run that never switched."""
    name = topic(partitions=2)
    ends = _produce_sequences(kafka, name, keys=200, per_key=40)
    quarters = [{p: (e * i // 4, e * (i + 1) // 4) for p, e in ends.items()} for i in range(4)]
    modes = [{}, {"changelog": True}, {"changelog": True}, {}]
    for batch, mode in enumerate(modes):  # a new processor per batch: a restarted job
        proc = _processor(s3, s3_url, check_order, ORDER_SCHEMA, tmp_path, mode)
        result = proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, quarters[batch]),
                                    batch)
        logs = {c.metrics["state"]["changelog"] for c in result.commits}
        assert logs == {batch in (1, 2)}, (batch, logs)  # the log mode's batches wrote logs
    out = proc.table().to_arrow()
    assert out.num_rows == sum(ends.values()) and pc.sum(out["violation"]).as_py() == 0
    steady = _processor(s3, f"{s3_url}-steady", check_order, ORDER_SCHEMA, tmp_path / "steady")
    for batch in range(4):
        steady.process_batch(kafka_batch(spark, kafka.bootstrap, name, quarters[batch]), batch)
    for partition in ends:
        assert dict(proc.read_state(name, partition)) == dict(steady.read_state(name, partition))


@pytest.mark.parametrize("emit", ["records", "ranges"])
def test_streaming_query_on_orderedkafka_with_a_restart(spark, kafka, topic, s3, s3_url,
                                                        tmp_path, emit) -> None:
    """End to end: readStream.format("orderedkafka") -> foreachBatch(process_batch), several
    micro-batches, the query stopped and started again from its checkpoint. ``emit=ranges``:
    the source yields one row per range and the ordered tasks read Kafka themselves."""
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    name = topic(partitions=3)
    keys, per_key = 300, 20
    records = [(f"k{i % keys}".encode(), str(i // keys).encode()) for i in range(keys * per_key)]
    half = len(records) // 2
    assert kafka.produce(name, records[:half]) == half

    def run_query() -> OrderedStateful:
        # ranges: also the column projection the tasks do themselves.
        columns = {"columns": ("value", "partition", "offset")} if emit == "ranges" else {}
        proc = _processor(s3, s3_url, check_order, ORDER_SCHEMA, tmp_path, **columns)
        frame = (spark.readStream.format("orderedkafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
                 .option("emit", emit).load())
        if emit == "ranges":
            assert frame.columns == ["topic", "partition", "startOffset", "endOffset", "reader"]
        query = (frame.writeStream.foreachBatch(proc.process_batch)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        return proc

    first = run_query()
    assert first.table().to_arrow().num_rows == half
    assert kafka.produce(name, records[half:]) == len(records) - half
    second = run_query()  # a new run: new writer epoch, state continues from the records
    out = second.table().to_arrow()
    assert out.num_rows == len(records)
    assert pc.sum(out["violation"]).as_py() == 0
    assert second.log.latest() is not None and second.log.latest() >= 5  # several batches
    final: dict[bytes, int] = {}
    for partition in range(3):
        final.update(second.read_state(name, partition))
    assert final == {f"k{i}".encode(): per_key - 1 for i in range(keys)}


@pytest.mark.parametrize("which", ["state", "output"])
def test_a_missing_bucket_is_named_at_construction(spark, s3, s3_url, tmp_path,
                                                   which) -> None:
    """A state or output location in a bucket that does not exist: ``OrderedStateful(...)``
    raises LocationError naming it (one HEAD of the bucket, through the filesystem the
    driver uses anyway); ``check_locations()`` (what ``orderedstream run`` calls before it
    starts a query) also probes that the locations can be written."""
    from orderedstream.core.errors import LocationError

    bad = f"s3://no-such-bucket-{time.time_ns()}/{which}"
    with pytest.raises(LocationError, match=f"ordered {which} location '{bad}': bucket "
                                            "'no-such-bucket-.*' does not exist at http"):
        OrderedStateful(
            check_order, state_location=bad if which == "state" else f"{s3_url}/state",
            output=bad if which == "output" else f"{s3_url}/out", output_schema=ORDER_SCHEMA,
            storage_options=s3.storage_options,
            store_options={"local_dir": str(tmp_path / "l")})
    OrderedStateful(check_order, state_location=f"{s3_url}/state", output=f"{s3_url}/out",
                    output_schema=ORDER_SCHEMA, storage_options=s3.storage_options
                    ).check_locations()  # writable: no error
