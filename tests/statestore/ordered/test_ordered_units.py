"""The ordered stage's pieces without Spark: options, timeouts, GroupState, and the keyed
state table and task body on a real RocksDB store with file:// snapshots."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pyarrow as pa
import pytest

from orderedstream.core.errors import OptionError, OrderViolationError, UserFunctionError
from orderedstream.statestore.ordered import (
    EventTimeTimeout,
    GroupState,
    NoTimeout,
    OrderedStateful,
    ProcessingTimeTimeout,
    parse_duration_ms,
)
from orderedstream.statestore.ordered.keyed_state import KeyedStateTable, decode_key, encode_key
from orderedstream.statestore.ordered.plan import BatchPlan, PartitionCommit, advance
from orderedstream.statestore.ordered.runner import OrderedTask
from orderedstream.statestore.ordered.state_access import store_options
from orderedstream.statestore.rocksdb.store import RocksDBStateStore

INPUT = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                   ("partition", pa.int32()), ("offset", pa.int64()),
                   ("timestamp", pa.timestamp("us", tz="UTC"))])
OUT = pa.schema([("key", pa.binary()), ("offset", pa.int64()), ("count", pa.int64())])


def records(topic: str, partition: int, offsets: list[int], keys: int = 5) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_pydict({
        "key": [b"k%d" % (o % keys) for o in offsets], "value": [b"%d" % o for o in offsets],
        "topic": [topic] * n, "partition": [partition] * n, "offset": offsets,
        "timestamp": [o * 1_000_000 for o in offsets]}, schema=INPUT)


def count(key: Any, record: Any, state: GroupState) -> list[tuple[Any, ...]]:
    if state.has_timed_out:
        state.remove()
        return [(key, -1, -1)]
    value = state.get_option(0) + 1
    state.update(value)
    return [(key, record["offset"], value)]


@pytest.fixture
def processor(tmp_path: Any) -> OrderedStateful:
    return OrderedStateful(count, state_location=f"file://{tmp_path}/state",
                           output=f"file://{tmp_path}/out", output_schema=OUT,
                           timeout=ProcessingTimeTimeout("1 hour"),
                           store_options={"local_dir": str(tmp_path / "local")})


def run(proc: OrderedStateful, plan: BatchPlan, *batches: pa.RecordBatch) -> list[PartitionCommit]:
    task = OrderedTask(proc.options, proc.func, plan, proc.sink)
    return [PartitionCommit.from_json(b.column(0)[0].as_py()) for b in task(iter(batches))]


def test_durations_parse_and_bad_ones_say_what_is_accepted() -> None:
    assert parse_duration_ms("1 hour") == 3_600_000
    assert parse_duration_ms("90 seconds") == 90_000
    assert parse_duration_ms("250ms") == 250
    assert parse_duration_ms(datetime.timedelta(minutes=2)) == 120_000
    assert ProcessingTimeTimeout("15 min").default_ms == 900_000
    assert EventTimeTimeout("10 s", column="ts").delay_ms == 10_000
    with pytest.raises(OptionError, match="unit one of"):
        parse_duration_ms("3 fortnights")
    with pytest.raises(OptionError, match="positive"):
        parse_duration_ms(0)


def test_options_are_validated_once_with_clear_errors(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    common: dict[str, Any] = {"output_schema": OUT, "output": f"file://{tmp_path}/o"}
    with pytest.raises(OptionError, match="state_location"):
        OrderedStateful(count, state_location=" ", **common)
    # a relative local path is the driver's, as Spark resolves its own paths
    monkeypatch.chdir(tmp_path)
    relative = OrderedStateful(count, state_location="./rel/state/", output="out",
                               output_schema=OUT).options
    assert (relative.state_location, relative.output) == (f"{tmp_path}/rel/state",
                                                          f"{tmp_path}/out")
    with pytest.raises(OptionError, match=r"storage_options=...\): a dict is required, got a "
                                          r"str \(JSON text: pass json.loads\(text\)\)"):
        OrderedStateful(count, state_location=f"file://{tmp_path}/s",
                        storage_options='{"anon": true}', **common)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="must differ"):
        OrderedStateful(count, state_location=f"file://{tmp_path}/o", **common)
    with pytest.raises(OptionError, match="max_cached_keys"):
        OrderedStateful(count, state_location=f"file://{tmp_path}/s", max_cached_keys=0,
                        **common)
    with pytest.raises(OptionError, match="timeout"):
        OrderedStateful(count, state_location=f"file://{tmp_path}/s", timeout="1 hour",  # type: ignore[arg-type]
                        **common)
    proc = OrderedStateful(count, state_location=f"file://{tmp_path}/s", **common)
    with pytest.raises(OptionError, match=r"needs input columns \['offset'\]"):
        proc.options.check_input(["key", "value", "topic", "partition"])


def test_group_state_refuses_the_wrong_timeout_kind() -> None:
    state = GroupState(NoTimeout.kind, 1_000, None)
    with pytest.raises(OptionError, match="ProcessingTimeTimeout"):
        state.set_timeout_duration("1 min")
    with pytest.raises(KeyError):
        state.get()
    event = GroupState("event", 1_000, 50_000)
    with pytest.raises(OptionError, match="older than the partition's watermark"):
        event.set_timeout_timestamp(40_000)
    event.set_timeout_timestamp(datetime.datetime.fromtimestamp(60, tz=datetime.UTC))
    assert event.timeout_timestamp_ms == 60_000


def test_timeout_durations_give_the_same_deadline_each_call() -> None:
    state = GroupState(ProcessingTimeTimeout.kind, 1_000, None)
    for duration, deadline in (("1 min", 61_000), ("1 min", 61_000), (60_000, 61_000),
                               (datetime.timedelta(seconds=2), 3_000), ("2 s", 3_000)):
        state.set_timeout_duration(duration)
        assert state.timeout_timestamp_ms == deadline, duration
    later = GroupState(ProcessingTimeTimeout.kind, 5_000, None)  # another batch's handle
    later.set_timeout_duration("1 min")
    assert later.timeout_timestamp_ms == 65_000
    for bad in (True, "soon", ["1 min"], None):  # a text seen before does not admit these
        with pytest.raises(OptionError, match="timeout"):
            state.set_timeout_duration(bad)  # type: ignore[arg-type]


def test_keys_round_trip_through_their_encoding() -> None:
    for key in (None, b"\x00bytes", "text", 42, ("t", 1)):
        assert decode_key(encode_key(key)) == key


def test_state_table_stays_bounded_and_finds_only_expired_keys(tmp_path: Any) -> None:
    store = RocksDBStateStore(f"file://{tmp_path}/s", store_options(_options(tmp_path)))
    with store.open(0, -1) as part:
        table = KeyedStateTable(part, max_cached=10)
        for i in range(1000):
            entry = table.load(encode_key(i))
            entry.value, entry.exists, entry.dirty = i, True, True
            entry.timeout_ms = 1_000 + i
            assert len(table._cache) <= 10
        assert sorted(decode_key(k) for k in table.expired(1_005)) == [0, 1, 2, 3, 4]
        assert table.next_timeout_ms() == 1_000
        assert table.load(encode_key(999)).value == 999


def _options(tmp_path: Any) -> Any:
    return OrderedStateful(count, state_location=f"file://{tmp_path}/state",
                           output=f"file://{tmp_path}/out", output_schema=OUT,
                           store_options={"local_dir": f"{tmp_path}/local"}).options


def test_task_keeps_state_across_batches_and_times_keys_out(processor: OrderedStateful) -> None:
    now = int(time.time() * 1000)
    first = run(processor, BatchPlan(0, now), records("t", 0, list(range(0, 50))),
                records("t", 0, list(range(50, 100))), records("t", 1, [0, 1, 2]))
    assert [(c.partition_id, c.records, c.first_offset, c.last_offset) for c in first] == [
        ("t/0", 100, 0, 99), ("t/1", 3, 0, 2)]
    bases = advance({}, first)
    # Two hours later: keys k0..k4 of t/0 get records, t/1's keys time out.
    later = BatchPlan(1, now + 7_200_000, bases)
    second = run(processor, later, records("t", 0, [100, 101, 102, 103, 104]))
    assert second[0].timeouts == 0 and second[0].num_keys == 5
    idle = OrderedTask(processor.options, count, later, processor.sink).run_timeouts_only("t/1")
    assert (idle.timeouts, idle.output_rows, idle.num_keys) == (3, 3, 0)


def test_out_of_order_or_repeated_offsets_are_refused(processor: OrderedStateful) -> None:
    with pytest.raises(OrderViolationError, match="out of order"):
        run(processor, BatchPlan(0, 1), records("t", 0, [0, 1, 3, 2]))
    with pytest.raises(OrderViolationError, match="appears twice"):
        run(processor, BatchPlan(0, 1), records("t", 0, [0, 1]), records("t", 1, [0]),
            records("t", 0, [2]))
    done = run(processor, BatchPlan(0, 1), records("t", 0, [0, 1, 2]))
    with pytest.raises(OrderViolationError, match="already processed"):
        run(processor, BatchPlan(1, 1, advance({}, done)), records("t", 0, [2, 3]))


def test_rows_that_do_not_fit_the_output_schema_are_named(tmp_path: Any) -> None:
    proc = OrderedStateful(lambda k, r, s: [(k, "not a number", 1)],
                           state_location=f"file://{tmp_path}/state",
                           output=f"file://{tmp_path}/out", output_schema=OUT,
                           store_options={"local_dir": str(tmp_path / "local")})
    with pytest.raises(UserFunctionError, match="output_schema"):
        run(proc, BatchPlan(0, 1), records("t", 0, [0]))


def test_user_errors_keep_their_type_and_name_the_record(tmp_path: Any) -> None:
    def fails(key: Any, record: Any, state: Any) -> None:
        if record["offset"] == 7:
            raise ZeroDivisionError("boom")

    proc = OrderedStateful(fails, state_location=f"file://{tmp_path}/state",
                           output=f"file://{tmp_path}/out", output_schema=OUT,
                           store_options={"local_dir": str(tmp_path / "local")})
    with pytest.raises(ZeroDivisionError) as info:
        run(proc, BatchPlan(3, 1), records("t", 0, list(range(10))))
    assert "Kafka t/0 offset 7, key b'k2' (batch 3)" in "".join(info.value.__notes__)
