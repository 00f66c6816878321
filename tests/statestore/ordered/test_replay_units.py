"""Replay's comparison and recorded-spec logic, without services: output diff per key (also
spilled over several buckets), state merge-join, function specs and ``--function`` loading."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from orderedstream.app.job.sessions import SessionLogic
from orderedstream.core.errors import OptionError
from orderedstream.statestore.ordered.keyed_state import encode_key
from orderedstream.statestore.ordered.replay_diff import OutputSpill, diff_state
from orderedstream.statestore.ordered.replay_spec import (
    function_from_spec,
    function_spec,
    load_function,
    timeout_from_spec,
    timeout_spec,
)
from orderedstream.statestore.ordered.timeouts import EventTimeTimeout, ProcessingTimeTimeout

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([("session", pa.string()), ("offset", pa.int64()), ("op", pa.string())])


def _rows(n: int, *, op: str = "update") -> list[dict]:
    return [{"session": f"s{i % 7}", "offset": i, "op": op} for i in range(n)]


@pytest.mark.parametrize("bucket_rows", [1_000_000, 50])
def test_output_diff_counts_added_removed_changed_per_key(tmp_path: Path,
                                                          bucket_rows: int) -> None:
    committed = _rows(300)
    replayed = [dict(r) for r in committed if r["offset"] != 10]          # 1 removed (s3)
    replayed.append({"session": "s3", "offset": 1000, "op": "insert"})  # 1 added (s3)
    for r in replayed:
        if r["offset"] in (20, 21):                                      # 2 changed (s6, s0)
            r["op"] = "UPDATE"
    replayed.append({"session": None, "offset": None, "op": "x"})       # 1 added, no key
    spill = OutputSpill(str(tmp_path), SCHEMA, ["session"], expected_rows=len(committed),
                        bucket_rows=bucket_rows)
    assert spill.buckets == (1 if bucket_rows > 300 else 6)
    spill.add("committed", pa.RecordBatch.from_pylist(committed, schema=SCHEMA))
    spill.add("replayed", pa.RecordBatch.from_pylist(replayed[::-1], schema=SCHEMA))
    diff = spill.diff()
    assert (diff.added, diff.removed, diff.changed, diff.same) == (2, 1, 2, 297)
    assert diff.per_key == {"'s3'": [1, 1, 0], "'s6'": [0, 0, 1], "'s0'": [0, 0, 1],
                            "None": [1, 0, 0]}
    assert diff.keys_differing == 4
    changed = sorted((d.key, d.offset, d.column, d.committed, d.replayed)
                     for d in diff.first if d.column == "op")
    assert changed == [("s0", 21, "op", "update", "UPDATE"), ("s6", 20, "op", "update", "UPDATE")]
    assert not list(tmp_path.glob("*.arrow"))


def test_output_diff_identical_and_duplicates_are_counted(tmp_path: Path) -> None:
    rows = _rows(20) + _rows(20)                 # every row twice: multisets, not sets
    spill = OutputSpill(str(tmp_path), SCHEMA, ["session"], expected_rows=40)
    spill.add("committed", pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
    spill.add("replayed", pa.RecordBatch.from_pylist(rows[:39], schema=SCHEMA))
    diff = spill.diff()
    assert (diff.added, diff.removed, diff.changed, diff.same) == (0, 1, 0, 39)
    spill = OutputSpill(str(tmp_path), SCHEMA, ["session"], expected_rows=40)
    spill.add("committed", pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
    spill.add("replayed", pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
    assert spill.diff().identical


def test_state_diff_merge_joins_values_and_timeouts() -> None:
    def side(items: dict[str, tuple]) -> list[tuple[bytes, tuple]]:
        return sorted((encode_key(k.encode()), v) for k, v in items.items())

    committed = side({"a": (1, None), "b": (2, 100), "c": (3, None), "e": (5, None)})
    replayed = side({"a": (1, None), "b": (2, 200), "c": (4, None), "d": (9, None)})
    diff = diff_state(iter(committed), iter(replayed))
    assert (diff.committed_keys, diff.replayed_keys) == (4, 4)
    assert (diff.changed, diff.only_committed, diff.only_replayed) == (2, 1, 1)
    assert [(d.key, d.column, d.committed, d.replayed) for d in diff.first] == [
        (b"b", "timeout_ms", 100, 200), (b"c", "value", 3, 4),
        (b"d", "<key only in replay>", None, 9), (b"e", "<key missing in replay>", 5, None)]
    same = diff_state(iter(committed), iter(committed))
    assert same.identical and same.committed_keys == 4


def test_function_spec_rebuilds_dataclass_logic_with_its_parameters() -> None:
    logic = SessionLogic(snapshot_every=7, idle_timeout="3 minutes")
    spec = function_spec(logic)
    assert spec == {"function": "orderedstream.app.job.sessions:SessionLogic",
                    "params": {"snapshot_every": 7, "idle_timeout": "3 minutes"},
                    "key_columns": ["session"]}
    assert function_from_spec(spec) == logic
    lam = function_spec(lambda key, record, state: None)
    assert lam["function"] is None
    with pytest.raises(OptionError, match="--function MODULE:ATTR"):
        function_from_spec(lam)
    for timeout in (ProcessingTimeTimeout("5 min"), EventTimeTimeout("10 s", "ts")):
        assert timeout_from_spec(timeout_spec(timeout)) == timeout


def test_load_function_says_what_is_accepted() -> None:
    assert isinstance(load_function("orderedstream.app.job.sessions:SessionLogic"), SessionLogic)
    for bad, message in (("nocolon", "MODULE:ATTR is required"),
                         ("no_such_module_xyz:f", "cannot import module"),
                         ("orderedstream.app.job.sessions:nope", "has no attribute"),
                         ("orderedstream.app.job.sessions:OUTPUT_SCHEMA", "not callable")):
        with pytest.raises(OptionError, match=message):
            load_function(bad)
