"""The ordered stage's hot path without Spark: column-wise record decoding, key encoding and
output batching give exactly what the per-row pyarrow conversions gave."""

from __future__ import annotations

import datetime
from typing import Any

import pyarrow as pa
import pytest

from orderedstream.core.errors import UserFunctionError
from orderedstream.statestore.ordered import GroupState, OrderedStateful
from orderedstream.statestore.ordered.keyed_state import encode_key
from orderedstream.statestore.ordered.plan import BatchPlan, PartitionCommit
from orderedstream.statestore.ordered.records import RecordDecoder, column_values, encoded_keys
from orderedstream.statestore.ordered.runner import OrderedTask, PartitionRun

MICROS = [0, 1_700_000_000_123_456, None, -86_400_000_001, 1_710_000_000_000_000]


@pytest.mark.parametrize("tz", [None, "UTC", "Etc/UTC", "+01:30", "Europe/Berlin",
                                "America/New_York"])
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamps_convert_like_pyarrow(tz: str | None, unit: str) -> None:
    column = pa.array(MICROS, pa.timestamp("us", tz=tz)).cast(pa.timestamp(unit, tz=tz),
                                                                safe=False)
    fast, slow = column_values(column), column.to_pylist()
    assert fast == slow
    assert [repr(v) for v in fast] == [repr(v) for v in slow]  # same tzinfo, same fold


@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Berlin", "America/New_York"])
@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_repeated_timestamps_convert_once_and_like_pyarrow(tz: str | None, unit: str) -> None:
    # Kafka timestamps repeat within a producer batch: distinct values are converted once.
    values = [v for v in MICROS if v is not None]
    column = pa.array([values[i % len(values)] for i in range(1000)],
                      pa.timestamp("us", tz=tz)).cast(pa.timestamp(unit, tz=tz), safe=False)
    fast, slow = column_values(column), column.to_pylist()
    assert fast == slow
    assert [repr(v) for v in fast] == [repr(v) for v in slow]
    assert fast[0] is fast[len(values)]  # one object per distinct value


def test_ambiguous_local_times_keep_their_fold() -> None:
    # 2023-11-05 01:30 happens twice in New York; the second one has fold=1.
    first, second = 1_699_162_200_000_000, 1_699_165_800_000_000
    column = pa.array([first, second], pa.timestamp("us", tz="America/New_York"))
    fast = column_values(column)
    assert fast == column.to_pylist()
    assert [v.fold for v in fast] == [v.fold for v in column.to_pylist()] == [0, 1]


def test_timestamps_outside_datetime_range_fall_back_to_pyarrow() -> None:
    column = pa.array([253_402_300_800], pa.timestamp("s"))  # year 10000
    with pytest.raises(OverflowError):
        column.to_pylist()
    with pytest.raises(OverflowError):  # the same error as pyarrow's, not a wrong value
        column_values(column)
    assert column_values(pa.array([None, None], pa.timestamp("us", tz="UTC"))) == [None, None]
    assert column_values(pa.array([], pa.timestamp("us", tz="UTC"))) == []


@pytest.mark.parametrize("values,typ", [
    ([b"a", None, b"", b"\x00x"], pa.binary()),
    ([b"a", None, b""], pa.large_binary()),
    (["a", None, "", "\u00e9"], pa.string()),
    (["a", None], pa.large_string()),
    ([1, None, -5], pa.int64()),
])
def test_keys_encode_column_wise_as_one_by_one(values: list[Any], typ: pa.DataType) -> None:
    column = pa.array(values, typ)
    assert encoded_keys(column, column.to_pylist()) == [encode_key(v) for v in values]


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "key": [b"a", b"b", None], "value": [b"1", b"2", b"3"], "topic": ["t"] * 3,
        "partition": [0] * 3, "offset": [5, 6, 7],
        "timestamp": pa.array([1, 2, None], pa.timestamp("ms", tz="UTC"))})


def test_decoder_builds_the_same_records_as_to_pylist() -> None:
    batch = _batch()
    keys, encoded, records = RecordDecoder(None, "key").decode(batch)
    assert list(records) == batch.to_pylist()
    assert list(keys) == [b"a", b"b", None]
    assert list(encoded) == [encode_key(k) for k in (b"a", b"b", None)]
    keys, encoded, records = RecordDecoder(("offset", "value"), "key").decode(batch)
    assert list(records) == [{"offset": o, "value": v}
                             for o, v in zip([5, 6, 7], [b"1", b"2", b"3"], strict=True)]
    assert list(keys) == [b"a", b"b", None]
    keys, encoded, records = RecordDecoder((), None).decode(batch)
    assert list(records) == [{}, {}, {}]
    assert list(keys) == [None] * 3 and list(encoded) == [encode_key(None)] * 3


OUT = pa.schema([pa.field("key", pa.binary()), pa.field("n", pa.int64(), nullable=False),
                 pa.field("at", pa.timestamp("us", tz="UTC"))], metadata={b"m": b"1"})


def test_output_rows_become_batches_of_the_output_schema() -> None:
    at = datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)
    expected = pa.RecordBatch.from_pydict({"key": [b"a", None], "n": [1, 2], "at": [at, None]},
                                          schema=OUT)
    for rows in ([(b"a", 1, at), (None, 2, None)],            # tuples (the fast path)
                 [[b"a", 1, at], [None, 2, None]],            # lists
                 [{"key": b"a", "n": 1, "at": at}, {"key": None, "n": 2, "at": None}]):
        batch = PartitionRun._to_batch(rows, OUT)
        assert batch.equals(expected) and batch.schema.metadata == {b"m": b"1"}


def test_dict_rows_take_missing_fields_as_null_and_refuse_unknown_ones() -> None:
    rows = [{"key": b"a", "n": 1}, {"n": 2}]
    batch = PartitionRun._to_batch(rows, OUT)
    assert batch.equals(pa.RecordBatch.from_pylist(rows, schema=OUT))
    assert batch.to_pylist() == [{"key": b"a", "n": 1, "at": None},
                                 {"key": None, "n": 2, "at": None}]
    # a misspelled field name would be dropped and its field committed as null: refused
    with pytest.raises(UserFunctionError, match=r"^the ordered user function returned a dict "
                                                r"row with field\(s\) 'm' that output_schema "
                                                r"\(key binary, n int64, at timestamp"):
        PartitionRun._to_batch([{"key": b"a", "n": 1}, {"key": b"b", "m": 2}], OUT)


def test_a_value_of_the_wrong_type_is_named_by_its_field() -> None:
    for rows in ([(b"a", "x", None)], [{"key": b"a", "n": "x"}]):
        with pytest.raises(UserFunctionError) as info:
            PartitionRun._to_batch(rows, OUT)
        first = str(info.value).splitlines()[0]
        assert "output_schema (key binary, n int64, at timestamp[us, tz=UTC]): field 'n' " \
               "(int64) got 'x' (str)" in first, first


@pytest.mark.parametrize("rows", [[(b"a", 1)], [(b"a", 1, None, 4)], [(b"a", "x", None)],
                                  [(b"a", 1, None), None], [{"key": b"a", "n": "x"}],
                                  [{"key": b"a", "n": 1}, None],
                                  [{"key": b"a", "n": 1}, (b"b", 2, None)],  # not nulls
                                  [(b"a", 1, None), {"key": b"b", "n": 2, "at": None}]])
def test_rows_that_do_not_fit_are_refused_with_the_schema(rows: list[Any]) -> None:
    with pytest.raises(UserFunctionError, match="output_schema"):
        PartitionRun._to_batch(rows, OUT)


def test_the_function_gets_every_column_by_default(tmp_path: Any) -> None:
    seen: list[dict[str, Any]] = []

    def keep(key: Any, record: Any, state: GroupState) -> list[tuple[Any, ...]]:
        seen.append(record)
        state.update(state.get_option(0) + 1)
        return [(key, state.get(), record["timestamp"])]

    proc = OrderedStateful(keep, state_location=f"file://{tmp_path}/state",
                           output=f"file://{tmp_path}/out", output_schema=OUT,
                           store_options={"local_dir": str(tmp_path / "local")})
    batch = _batch()
    task = OrderedTask(proc.options, proc.func, BatchPlan(0, 1), proc.sink)
    (commit,) = [PartitionCommit.from_json(b.column(0)[0].as_py()) for b in task(iter([batch]))]
    assert seen == batch.to_pylist()
    assert all(type(record) is dict for record in seen)
    assert (commit.records, commit.output_rows, commit.num_keys) == (3, 3, 3)
