"""Durations and byte sizes as users write them, parsed in one place for every option of the pack.

- durations: int/float milliseconds, ``datetime.timedelta``, or ``"<number> <unit>"`` with a unit
  of ms, s, min (or m), h, d, w and their long forms (``"1 hour"``, ``"90 seconds"``, ``"15m"``);
- sizes: int bytes or ``"<number><unit>"`` with a binary unit (``"128MB"``, ``"64m"``, ``"1GiB"``).

Errors are ``OptionError``s that name the option (``what``) and show the accepted forms.
"""

from __future__ import annotations

import datetime
import functools
import re

from orderedstream.core.errors import OptionError

Duration = int | float | str | datetime.timedelta

_UNITS_MS = {
    "": 1, "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
    "w": 604_800_000, "week": 604_800_000, "weeks": 604_800_000,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_DURATION_FORMS = ("'<number> <unit>' with unit one of ms, s/seconds, min/minutes (or m), "
                   "h/hours, d/days, w/weeks (e.g. '1 hour', '15m', '500ms'), or milliseconds")

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


@functools.lru_cache(maxsize=512)
def _duration_text_ms(text: str) -> int | None:
    # Cached: user functions call set_timeout_duration("10 minutes") once per record.
    match = _DURATION.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS_MS:
        return None
    return int(float(match.group(1)) * _UNITS_MS[unit])


def parse_duration_ms(value: Duration, what: str = "duration", *,
                      allow_zero: bool = False) -> int:
    """Milliseconds of a duration as users write it (see the module's forms).

    Parameters
    ----------
    value
        Int or float milliseconds, a ``datetime.timedelta`` or a text such as ``"1 hour"``.
    what
        How the error names the option.
    allow_zero
        Accept 0 as well as positive durations.

    Returns
    -------
    int
        The duration in whole milliseconds.

    Raises
    ------
    OptionError
        ``value`` is a bool or of another type, a text that does not parse, negative, or zero
        without ``allow_zero``.

    Runs on
    -------
    both
    """
    if isinstance(value, bool):
        raise OptionError(f"{what} must be a duration, got {value!r}")
    if isinstance(value, datetime.timedelta):
        millis = int(value.total_seconds() * 1000)
    elif isinstance(value, (int, float)):
        millis = int(value)
    elif isinstance(value, str):
        parsed = _duration_text_ms(value)
        if parsed is None:
            raise OptionError(f"{what}: cannot parse {value!r} as a duration; "
                              f"use {_DURATION_FORMS}")
        millis = parsed
    else:
        raise OptionError(
            f"{what} must be int milliseconds, datetime.timedelta or a string like '1 hour', "
            f"got {type(value).__name__}")
    if millis < 0 or (millis == 0 and not allow_zero):
        raise OptionError(f"{what} must be {'>= 0' if allow_zero else 'positive'}, "
                          f"got {value!r}")
    return millis


def parse_size_bytes(value: int | str, what: str = "size") -> int:
    """Bytes of a size as users write it: ``134217728``, ``"128MB"``, ``"128m"``, ``"1GiB"``.

    Parameters
    ----------
    value
        Int bytes or a text with a binary unit (k, m, g, t, with or without ``i``/``b``).
    what
        How the error names the option.

    Returns
    -------
    int
        The size in bytes.

    Raises
    ------
    OptionError
        ``value`` does not parse as a size, or is not positive.

    Runs on
    -------
    both
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise OptionError(f"{what}={value!r} is not a size: use bytes or a number "
                              "with a unit such as 64MB, 512KB, 1GB")
        unit = (match.group(2) or "").lower()[:1]
        number = int(match.group(1)) * _SIZE_UNITS[unit]
    if number <= 0:
        raise OptionError(f"{what}={value!r} must be positive")
    return number
