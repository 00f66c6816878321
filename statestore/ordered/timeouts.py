"""Timeout modes of ordered stateful processing, in the spirit of Spark's ``GroupStateTimeout``.

Durations are milliseconds (int), ``datetime.timedelta`` or strings such as ``"1 hour"``,
``"90 seconds"`` or ``"15 min"``.
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
    """Timeouts against the batch's processing time (wall clock of the driver at batch start).

    A key times out once the batch's processing time passes the duration the function set
    with ``state.set_timeout_duration(...)`` plus the processing time of the call that set it.

    Parameters
    ----------
    default
        Applied to every key the function touches without setting a timeout itself;
        ``None``: no default.

    Raises
    ------
    OptionError
        ``default`` is not a duration."""

    default_ms: int | None
    kind = "processing"

    def __init__(self, default: Duration | None = None) -> None:
        object.__setattr__(self, "default_ms", None if default is None
                           else parse_duration_ms(default, "ProcessingTimeTimeout(default)"))


@dataclass(frozen=True, init=False)
class EventTimeTimeout:
    """Timeouts against a per-Kafka-partition watermark: max event time seen minus ``delay``.

    A key times out once its partition's watermark passes the timestamp the function set
    with ``state.set_timeout_timestamp(...)``. The watermark is per Kafka partition, so it is
    deterministic: a replayed batch computes the same one.

    Parameters
    ----------
    delay
        How far the watermark trails the largest event time seen (a duration).
    column
        The input's event-time column (a Spark timestamp, or a long of epoch milliseconds);
        Kafka's record ``timestamp`` by default.

    Raises
    ------
    OptionError
        ``delay`` is not a duration, or ``column`` is not a column name.
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
