"""argparse ``type`` functions shared by the CLI's commands: the option is named in front of
the message by argparse, the message says what is accepted."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(minimum: int, unit: str) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of ``unit`` no smaller than ``minimum``.

    Parameters
    ----------
    minimum
        The smallest value accepted.
    unit
        What the number counts, as the message and the type's name say it (``"restarts"``).

    Returns
    -------
    callable
        ``str -> int``; it raises ``argparse.ArgumentTypeError`` (argparse names the option
        in front of the message) for text that is not a whole number, or below ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number of {unit}; accepted: {minimum} or more"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be {minimum} or more {unit} (got {value})")
        return value

    parse.__name__ = f"number of {unit}"
    return parse


def seconds_option(text: str) -> float:
    """An argparse ``type``: a positive, finite number of seconds.

    Parameters
    ----------
    text
        The option's value as given.

    Returns
    -------
    float
        The seconds.

    Raises
    ------
    argparse.ArgumentTypeError
        ``text`` is not a number, or not above 0, or infinite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds; accepted: a number > 0, e.g. 5 or 0.5"
        ) from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 (got {text})")
    return value


__all__ = ["at_least", "seconds_option"]
