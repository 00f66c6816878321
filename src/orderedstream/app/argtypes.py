"""argparse ``type`` functions shared by the CLI's commands: the option is named in front of
the message by argparse, the message says what is accepted."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(minimum: int, unit: str) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of ``unit`` no smaller than ``minimum``
    (argparse names the option in front of the message)."""

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
    """An argparse ``type``: a positive number of seconds."""
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
