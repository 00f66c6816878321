"""Thread pools lent to one job at a time and kept between jobs, so a task does not start
threads (why: docs/decisions/0023-thread-pools-kept-between-tasks.md).

The borrower's contract: leaving the ``with`` block normally, every future it submitted is
done (it waited for them); on an exception the pool is shut down (its queued jobs cancelled,
the running one waited for) and not kept. A forked child (Spark's worker daemon forks its
workers) forgets the parent's pools: their threads do not exist there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

_KEEP = 2
"""Idle pools kept per (name, size): a task lends one at a time; 2 covers a nested writer."""

_lock = threading.Lock()
_idle: dict[tuple[str, int], list[ThreadPoolExecutor]] = {}


def _forget() -> None:
    global _lock
    _lock = threading.Lock()
    _idle.clear()


os.register_at_fork(after_in_child=_forget)


@contextmanager
def lend(name: str, workers: int = 1) -> Iterator[ThreadPoolExecutor]:
    """Lend a ``ThreadPoolExecutor`` of ``workers`` threads named ``orderedstream-<name>``
    for this ``with`` block only: an idle pool of the same name and size, or a new one.

    Parameters
    ----------
    name
        The pool's name: pools are kept and lent again by ``(name, workers)``.
    workers
        The pool's thread count.

    Returns
    -------
    Iterator[ThreadPoolExecutor]
        Yields the pool once. Leaving the block normally keeps the pool for the next borrower
        (up to two idle per name and size; a further one is shut down); the borrower must
        have waited for its futures. On an exception the pool is shut down (queued jobs
        cancelled, the running one waited for) and the exception passes on.

    Runs on
    -------
    both (the driver's objectstore reads; the executors' output and state uploads)
    """
    key = (name, workers)
    with _lock:
        idle = _idle.get(key)
        pool = idle.pop() if idle else None
    if pool is None:
        pool = ThreadPoolExecutor(workers, thread_name_prefix=f"orderedstream-{name}")
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    with _lock:
        idle = _idle.setdefault(key, [])
        if len(idle) < _KEEP:
            idle.append(pool)
            return
    pool.shutdown(wait=False)


__all__ = ["lend"]
