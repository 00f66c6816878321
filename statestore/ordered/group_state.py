"""``GroupState``: the handle the user function gets for one key's state (executor side).

Modelled on Spark's ``GroupState`` (``pyspark.sql.streaming.state``) with snake_case names.
The function is called once per record, in offset order, and once per timed-out key; as in
Spark, a key's timeout is cleared on every call unless the call sets it again (or the
processor has a default timeout). Values are any picklable Python object; call ``update``
after changing a value, mutation in place is not tracked.
"""

from __future__ import annotations

import datetime
from typing import Any

from orderedstream.core.errors import OptionError, StateKeyError, StateValueError
from orderedstream.statestore.ordered.keyed_state import StateEntry
from orderedstream.statestore.ordered.timeouts import Duration, parse_duration_ms

NO_TIMESTAMP = -1
_MAX_DEADLINES = 256  # duration texts remembered per handle (a function uses a few)


class GroupState:
    """One key's state during one call of the user function. Do not keep it across calls."""

    __slots__ = ("_entry", "_timeout_kind", "_processing_time_ms", "_watermark_ms",
                 "_has_timed_out", "_timeout_set", "_deadlines")

    def __init__(self, timeout_kind: str, processing_time_ms: int,
                 watermark_ms: int | None) -> None:
        self._entry = StateEntry()
        self._timeout_kind = timeout_kind
        self._processing_time_ms = processing_time_ms
        self._watermark_ms = watermark_ms
        self._has_timed_out = False
        self._timeout_set = False
        # duration text -> its deadline in this batch (epoch ms), for set_timeout_duration
        self._deadlines: dict[str, int] = {}

    def _bind(self, entry: StateEntry, has_timed_out: bool) -> None:
        """Point this (reused) handle at ``entry`` for the next call."""
        self._entry = entry
        self._has_timed_out = has_timed_out
        self._timeout_set = False

    # ---- reading ---------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        """Whether the key has state."""
        return self._entry.exists

    def get(self) -> Any:
        """The state value; raises ``StateKeyError`` (a ``KeyError``) when there is none
        (check ``exists``)."""
        if not self._entry.exists:
            raise StateKeyError("state is not defined for this key (or was removed): check "
                           "state.exists or use state.get_option()")
        return self._entry.value

    def get_option(self, default: Any = None) -> Any:
        """The state value, or ``default`` when there is none.

        Parameters
        ----------
        default
            What to return when the key has no state.

        Returns
        -------
        Any
            The value, or ``default``.

        Runs on
        -------
        executor"""
        return self._entry.value if self._entry.exists else default

    @property
    def has_timed_out(self) -> bool:
        """True when this call is the key's timeout call (``record`` is then None)."""
        return self._has_timed_out

    @property
    def timeout_timestamp_ms(self) -> int:
        """The key's current timeout (epoch ms), or -1 (``NO_TIMESTAMP``) when none is set."""
        timeout = self._entry.timeout_ms
        return NO_TIMESTAMP if timeout is None else timeout

    def get_current_processing_time_ms(self) -> int:
        """The batch's processing time (driver clock at batch start; constant in a batch)."""
        return self._processing_time_ms

    def get_current_watermark_ms(self) -> int:
        """The Kafka partition's event-time watermark (event-time timeouts only)."""
        if self._timeout_kind != "event":
            raise OptionError("get_current_watermark_ms() needs timeout=EventTimeTimeout(...)")
        return NO_TIMESTAMP if self._watermark_ms is None else self._watermark_ms

    # ---- writing ---------------------------------------------------------------------------
    def update(self, value: Any) -> None:
        """Set the key's state to ``value`` (written to the store at the next flush).

        Parameters
        ----------
        value
            Any picklable object (by the stage's codec). Call again after changing it in
            place: mutation is not tracked.

        Raises
        ------
        StateValueError
            ``value`` is ``None`` (a ``ValueError``, as in Spark; use :meth:`remove`).

        Runs on
        -------
        executor"""
        if value is None:
            raise StateValueError("state.update(None) is not allowed; use state.remove()")
        entry = self._entry
        entry.value = value
        entry.exists = True
        entry.dirty = True

    def remove(self) -> None:
        """Delete the key's state (and its timeout)."""
        entry = self._entry
        entry.value = None
        entry.exists = False
        entry.timeout_ms = None
        entry.dirty = True

    def set_timeout_duration(self, duration: Duration) -> None:
        """Time the key out ``duration`` after this batch's processing time.

        Cleared by the next call for the key unless set again.

        Parameters
        ----------
        duration
            Milliseconds (int), a ``datetime.timedelta`` or a string such as ``"1 hour"``.

        Raises
        ------
        OptionError
            The processor does not have processing-time timeouts, or ``duration`` does not
            parse.

        Runs on
        -------
        executor"""
        try:
            deadline = self._deadlines.get(duration)  # type: ignore[arg-type]
        except TypeError:  # unhashable: not a duration, which _deadline says
            deadline = None
        if deadline is None:
            deadline = self._deadline(duration)
        entry = self._entry
        entry.timeout_ms = deadline
        entry.dirty = True
        self._timeout_set = True

    def _deadline(self, duration: Duration) -> int:
        """The epoch ms ``duration`` after this batch's processing time (texts remembered)."""
        if self._timeout_kind != "processing":
            raise OptionError("set_timeout_duration() needs timeout=ProcessingTimeTimeout(); "
                              f"this processor has {self._timeout_kind!r} timeouts")
        deadline = self._processing_time_ms + parse_duration_ms(duration, "timeout")
        # Only exact str keys: an int or bool never hits a text's entry, so it is checked.
        if duration.__class__ is str and len(self._deadlines) < _MAX_DEADLINES:
            self._deadlines[duration] = deadline  # type: ignore[index]
        return deadline

    def set_timeout_timestamp(self, timestamp: int | datetime.datetime) -> None:
        """Time the key out once the Kafka partition's watermark passes ``timestamp``.

        Parameters
        ----------
        timestamp
            Epoch milliseconds (int) or a ``datetime`` (naive is taken as UTC); not below the
            current watermark.

        Raises
        ------
        OptionError
            The processor does not have event-time timeouts; ``timestamp`` is neither an int
            nor a datetime, is not positive, or is older than the watermark.

        Runs on
        -------
        executor"""
        if self._timeout_kind != "event":
            raise OptionError("set_timeout_timestamp() needs timeout=EventTimeTimeout(...); "
                              f"this processor has {self._timeout_kind!r} timeouts")
        if isinstance(timestamp, datetime.datetime):
            if timestamp.tzinfo is None:
                timestamp = timestamp.replace(tzinfo=datetime.UTC)
            millis = int(timestamp.timestamp() * 1000)
        elif isinstance(timestamp, int) and not isinstance(timestamp, bool):
            millis = timestamp
        else:
            raise OptionError(f"set_timeout_timestamp() takes epoch milliseconds (int) or a "
                              f"datetime, got {type(timestamp).__name__}")
        if millis <= 0:
            raise OptionError(f"set_timeout_timestamp({millis}): must be positive epoch ms")
        if self._watermark_ms is not None and millis < self._watermark_ms:
            raise OptionError(f"set_timeout_timestamp({millis}) is older than the partition's "
                              f"watermark {self._watermark_ms}")
        self._set_timeout(millis)

    def _set_timeout(self, millis: int) -> None:
        entry = self._entry
        entry.timeout_ms = millis
        entry.dirty = True
        self._timeout_set = True

    def __repr__(self) -> str:
        shown = repr(self._entry.value) if self._entry.exists else "<undefined>"
        return f"GroupState({shown}, timeout={self.timeout_timestamp_ms})"
