"""The benchmark's streaming figures: a query's time ends at its last needed batch's end as
Spark's progress gives it (``benchmarks.cases._streaming``), not at the poll that saw it."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from benchmarks.cases._streaming import _last_needed_batch, progress_end


def _progress(batch: int, stamp: str, took_ms: int, rows: int) -> dict[str, object]:
    return {"batchId": batch, "timestamp": stamp, "numInputRows": rows,
            "durationMs": {"triggerExecution": took_ms, "addBatch": took_ms - 10}}


def test_a_batch_ends_at_its_trigger_start_plus_its_duration() -> None:
    end = progress_end(_progress(0, "2026-11-28T19:41:42.528Z", 3482, 8))
    expected = datetime(2026, 11, 28, 19, 41, 46, 10000, tzinfo=UTC).timestamp()
    assert end is not None and abs(end - expected) < 1e-6
    assert progress_end({"batchId": 0, "timestamp": "2026-11-28T19:41:42.528Z"}) is None
    assert progress_end({"batchId": 0, "durationMs": {"triggerExecution": 5}}) is None


def test_the_batch_that_reached_the_records_is_the_one_timed() -> None:
    runs = [_progress(0, "2026-11-28T10:00:00.000Z", 900, 60),
            _progress(1, "2026-11-28T10:00:01.000Z", 800, 40),
            _progress(2, "2026-11-28T10:00:02.000Z", 50, 0)]  # a no-data batch after
    assert _last_needed_batch(runs, 100, None) is runs[1]
    assert _last_needed_batch(runs, 101, None) is None
    # an OrderedStateful's ranges rows are not records: the batch of its last result
    stage = SimpleNamespace(last_result=SimpleNamespace(batch_id=0))
    assert _last_needed_batch(runs, 100, stage) is runs[0]
    assert _last_needed_batch(runs, 100, SimpleNamespace(last_result=None)) is None
