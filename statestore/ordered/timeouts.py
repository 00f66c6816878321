"""Timeout modes of ordered stateful processing, in the spirit of Spark's ``GroupStateTimeout``.

- ``NoTimeout``: keys live until the user function removes them.
- ``ProcessingTimeTimeout(default)``: a key times out once the batch's processing time (the
  driver's clock when the batch starts) passes ``state.set_timeout_duration(...)`` + the time of
  the call that set it. ``default`` (optional) is applied to every key the function touches
  without setting a timeout itself.
- ``EventTimeTimeout(delay, column)``: a key times out once its Kafka partition's watermark
  (the largest event time seen in that partition minus ``delay``) passes the timestamp the
  function set with ``state.set_timeout_timestamp(...)``. The watermark is per Kafka partition,
  so it is deterministic: a replayed batch computes the same one.

Durations are milliseconds (int), ``datetime.timedelta`` or strings like ``"1 hour"``,
``"90 seconds"``, ``"15 min"``, ``"250ms"``.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from orderedstream.core.errors import OptionError

_UNITS_MS = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
    "w": 604_800_000, "week": 604_800_000, "weeks": 604_800_000,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")

Duration = int | float | str | datetime.timedelta


def parse_duration_ms(value: Duration, what: str = "duration") -> int:
    """Milliseconds of ``value`` (int ms, timedelta, or ``"<number> <unit>"``); must be > 0."""
    if isinstance(value, bool):
        raise OptionError(f"{what} must be a duration, got {value!r}")
    if isinstance(value, datetime.timedelta):
        millis = int(value.total_seconds() * 1000)
    elif isinstance(value, (int, float)):
        millis = int(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _UNITS_MS:
            raise OptionError(
                f"{what}: cannot parse {value!r}; use '<number> <unit>' with unit one of "
                "ms, s/seconds, min/minutes, h/hours, d/days, w/weeks (e.g. '1 hour')")
        millis = int(float(match.group(1)) * _UNITS_MS[unit])
    else:
        raise OptionError(
            f"{what} must be int milliseconds, datetime.timedelta or a string like '1 hour', "
            f"got {type(value).__name__}")
    if millis <= 0:
        raise OptionError(f"{what} must be positive, got {value!r}")
    return millis


@dataclass(frozen=True)
class NoTimeout:
    """Keys never time out; ``set_timeout_*`` calls are refused."""

    kind = "none"


@dataclass(frozen=True, init=False)
class ProcessingTimeTimeout:
    """Timeouts against the batch's processing time (wall clock of the driver at batch start)."""

    default_ms: int | None
    kind = "processing"

    def __init__(self, default: Duration | None = None) -> None:
        object.__setattr__(self, "default_ms", None if default is None
                           else parse_duration_ms(default, "ProcessingTimeTimeout(default)"))


@dataclass(frozen=True, init=False)
class EventTimeTimeout:
    """Timeouts against a per-Kafka-partition watermark: max event time seen minus ``delay``.

    ``column`` names the event-time column of the input (a Spark timestamp, or a long of epoch
    milliseconds); Kafka's record ``timestamp`` by default.
    """

    delay_ms: int
    column: str
    kind = "event"

    def __init__(self, delay: Duration = 0, column: str = "timestamp") -> None:
        delay_ms = 0 if delay in (0, "0") else parse_duration_ms(delay, "EventTimeTimeout(delay)")
        if not isinstance(column, str) or not column:
            raise OptionError(f"EventTimeTimeout(column) must be a column name, got {column!r}")
        object.__setattr__(self, "delay_ms", delay_ms)
        object.__setattr__(self, "column", column)


Timeout = NoTimeout | ProcessingTimeTimeout | EventTimeTimeout
