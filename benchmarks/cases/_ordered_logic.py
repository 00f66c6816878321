"""The one per-key logic the ordered benchmark runs three ways (ours, ``applyInPandasWithState``,
``transformWithStateInPandas``): per key, values are 0, 1, 2, ... in production order; the state
is the last value seen, and a record whose value is not last + 1 counts as an order violation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

OUTPUT_DDL = "key binary, partition int, offset long, seq long, violation int"
# The input columns the logic reads (besides the key): every engine gets only these.
COLUMNS = ("value", "partition", "offset")


# ---- the same logic, three ways --------------------------------------------------------
def check_order(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    """``OrderedStateful`` function: one call per record, in offset order."""
    seq = int(record["value"])
    previous = state.get_option(-1)
    state.update(seq)
    return [(key, record["partition"], record["offset"], seq, 0 if seq == previous + 1 else 1)]


def _checked_frames(frames: Iterator[Any], last: list[int]) -> Iterator[Any]:
    """One key's pandas frames, in the order Spark hands them over, as output frames;
    ``last[0]``: the key's last value before, then after them."""
    import pandas as pd

    previous = last[0]
    for frame in frames:
        seqs = [int(v) for v in frame["value"]]
        violations = []
        for seq in seqs:
            violations.append(0 if seq == previous + 1 else 1)
            previous = seq
        last[0] = previous
        yield pd.DataFrame({"key": frame["key"], "partition": frame["partition"],
                            "offset": frame["offset"], "seq": seqs, "violation": violations})


def check_order_pandas(key: Any, frames: Any, state: Any) -> Iterator[Any]:
    """``applyInPandasWithState`` function: all of one key's rows of a batch, as frames."""
    last = [state.get[0] if state.exists else -1]
    yield from _checked_frames(frames, last)
    state.update((last[0],))


class CheckOrderProcessor(StatefulProcessor):
    """``transformWithStateInPandas`` processor: the last value in a ``ValueState``."""

    def init(self, handle: Any) -> None:
        self.last = handle.getValueState("last", "last long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any,
                        ) -> Iterator[Any]:
        last = [self.last.get()[0] if self.last.exists() else -1]
        yield from _checked_frames(rows, last)
        self.last.update((last[0],))

    def close(self) -> None:
        pass
