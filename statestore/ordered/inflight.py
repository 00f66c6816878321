"""A task's Kafka partitions, two in flight: one runs the user function while the other waits.

Why, and how it was chosen: docs/decisions/0016-two-ranges-in-flight.md. The user function is
never called concurrently (:func:`exclusive`); each partition keeps its own state, output
files and commit row, and its records stay in offset order in its one thread.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from orderedstream.core.errors import OptionError

T = TypeVar("T")
R = TypeVar("R")

IN_FLIGHT_ENV = "ORDEREDSTREAM_PARTITIONS_IN_FLIGHT"
"""Kafka partitions a task runs at once (default :data:`DEFAULT_IN_FLIGHT`; 1: one by one)."""
DEFAULT_IN_FLIGHT = 2
LIGHT_RANGE_RECORDS = 10_000
"""A Kafka range of at most this many offsets may run beside another; a larger one runs alone
(its fixed costs are small next to its records, and two would need twice the memory)."""

_USER_CALLS = threading.Lock()
"""Held while one partition's records go through the user function (one per worker process:
a Python worker runs one task at a time)."""


def partitions_in_flight() -> int:
    """How many Kafka partitions a task runs at once: ``ORDEREDSTREAM_PARTITIONS_IN_FLIGHT``
    (a whole number from 1 to 16), else 2."""
    text = os.environ.get(IN_FLIGHT_ENV, "").strip()
    if not text:
        return DEFAULT_IN_FLIGHT
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 16:
        raise OptionError(f"{IN_FLIGHT_ENV}={text!r}: a whole number from 1 to 16 is accepted "
                          "(Kafka partitions one task runs at once; 1 runs them one by one)")
    return value


def light_range(rng: Any) -> bool:
    """Whether a Kafka range is small enough to run beside another.

    Parameters
    ----------
    rng
        A Kafka range with ``start`` and ``end`` offsets.

    Returns
    -------
    bool
        True for at most :data:`LIGHT_RANGE_RECORDS` offsets.

    Runs on
    -------
    executor"""
    return int(rng.end) - int(rng.start) <= LIGHT_RANGE_RECORDS


def exclusive(batches: Iterator[R]) -> Iterator[R]:
    """``batches`` with each step taken under the worker's user-function lock.

    The steps are where the user function runs (the GIL serializes that work anyway), so a
    function keeping something on ``self`` behaves as it would one partition at a time; what
    the consumer does with an item runs outside the lock.

    Parameters
    ----------
    batches
        The iterator whose steps call the user function.

    Returns
    -------
    Iterator[R]
        The same items, in order.

    Runs on
    -------
    executor"""
    while True:
        with _USER_CALLS:
            try:
                item = next(batches)
            except StopIteration:
                return
        yield item


def in_order(work: Callable[[T], R], items: Iterable[T], *, depth: int,
             light: Callable[[T], bool] | None = None) -> Iterator[R]:
    """``work(item)`` for every item, up to ``depth`` at once in threads, in the items' order.

    Nothing outlives the call: on an error, or when the caller closes the iterator, the work
    in flight finishes first and no new item starts (a retry in this worker must not meet a
    thread still writing the same partition's local state).

    Parameters
    ----------
    work
        What to run for one item (one Kafka partition's range).
    items
        The items, read in the caller's thread only.
    depth
        Items at most in flight; 1 or less runs them one by one in the caller's thread.
    light
        ``light(item)`` False (a large range): the item runs alone in the caller's thread,
        so memory stays what one partition needs; ``None``: every item is light.

    Returns
    -------
    Iterator[R]
        ``work``'s results, in the items' order.

    Raises
    ------
    Exception
        The first error of ``work``, once the work in flight has finished.

    Runs on
    -------
    executor"""
    if depth <= 1:
        for item in items:
            yield work(item)
        return
    pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="orderedstream-partition")
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            alone = light is not None and not light(item)
            while pending and (alone or len(pending) >= depth):
                yield pending.popleft().result()
            if alone:  # in this thread, as with depth 1
                yield work(item)
                continue
            pending.append(pool.submit(work, item))
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["DEFAULT_IN_FLIGHT", "IN_FLIGHT_ENV", "LIGHT_RANGE_RECORDS", "exclusive", "in_order",
           "light_range", "partitions_in_flight"]
