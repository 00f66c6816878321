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

from dataclasses import dataclass

from orderedstream.core.errors import OptionError
from orderedstream.core.units import Duration, parse_duration_ms

__all__ = ["Duration", "EventTimeTimeout", "NoTimeout", "ProcessingTimeTimeout",
           "parse_duration_ms"]

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
