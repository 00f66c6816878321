"""``reason_first_in_callback``: the printed trace of a pack error a ``foreachBatch`` function
raises (what Spark quotes after its prefix) starts with the pack's sentence, whatever caused
it; the original cause stays reachable and is named after the message."""

from __future__ import annotations

import traceback

import pytest

from orderedstream.core.errors import LocationError, OptionError, pack_error_in
from orderedstream.core.worker_errors import reason_first_in_callback


@reason_first_in_callback
def _batch(batch_df: object, batch_id: int) -> None:
    try:
        raise FileNotFoundError("NoSuchBucket: The specified bucket does not exist " * 20)
    except FileNotFoundError as exc:
        raise LocationError("ordered state location 's3://gone/q': bucket 'gone' does not "
                            "exist. Create it") from exc


def test_the_printed_trace_starts_with_the_sentence() -> None:
    with pytest.raises(LocationError) as failed:
        _batch(None, 0)
    trace = "".join(traceback.format_exception(failed.value))
    sentence = "orderedstream.core.errors.LocationError: ordered state location 's3://gone/q'"
    assert trace.startswith(sentence), trace[:500]
    assert isinstance(failed.value.original_cause, FileNotFoundError)  # type: ignore[attr-defined]
    assert "(caused by FileNotFoundError: NoSuchBucket" in trace
    assert pack_error_in(failed.value) is failed.value


def test_other_exceptions_pass_unchanged() -> None:
    @reason_first_in_callback
    def broken(batch_df: object, batch_id: int) -> None:
        raise RuntimeError("the user's own failure")

    with pytest.raises(RuntimeError, match="the user's own failure") as failed:
        broken(None, 1)
    assert failed.value.__cause__ is None


def test_a_pack_error_quoted_in_another_is_raised_as_itself() -> None:
    @reason_first_in_callback
    def planned(batch_df: object, batch_id: int) -> None:
        raise RuntimeError("Job aborted: Traceback (most recent call last):\n  File \"x\", "
                           "line 1\norderedstream.core.errors.OptionError: option x is bad\n")

    with pytest.raises(OptionError) as failed:
        planned(None, 2)
    trace = "".join(traceback.format_exception(failed.value))
    assert trace.startswith("orderedstream.core.errors.OptionError: option x is bad"), trace
