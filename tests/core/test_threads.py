"""``orderedstream.core.threads``: pools lent to one job at a time and kept between jobs."""

from __future__ import annotations

import os
import threading

import pytest

from orderedstream.core import threads

pytestmark = pytest.mark.unit


def _thread_ident(pool: object) -> int:
    return pool.submit(threading.get_ident).result()  # type: ignore[attr-defined]


def test_a_returned_pool_is_lent_again_with_its_thread() -> None:
    with threads.lend("t-reuse") as first:
        ident = _thread_ident(first)
    with threads.lend("t-reuse") as second:
        assert second is first
        assert _thread_ident(second) == ident  # no new thread started
    with threads.lend("t-reuse", 2) as other_size:
        assert other_size is not first


def test_nested_lends_get_different_pools() -> None:
    with threads.lend("t-nested") as outer, threads.lend("t-nested") as inner:
        assert outer is not inner
        assert _thread_ident(outer) != _thread_ident(inner)


def test_a_pool_whose_job_failed_is_shut_down_and_not_kept() -> None:
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(5)
        ran.append("slow")

    with pytest.raises(RuntimeError, match="boom"):
        with threads.lend("t-fail") as pool:
            pool.submit(slow)
            queued = pool.submit(ran.append, "queued")
            started.wait(5)
            threading.Timer(0.2, release.set).start()
            raise RuntimeError("boom")
    # the running job was waited for, the queued one cancelled
    assert ran == ["slow"] and queued.cancelled()
    with threads.lend("t-fail") as again:
        assert again is not pool
        assert again.submit(lambda: 7).result() == 7


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_starts_its_own_pools() -> None:
    """Spark's daemon forks its workers: a pool kept by the parent has no thread there."""
    with threads.lend("t-fork") as pool:
        pool.submit(lambda: None).result()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            with threads.lend("t-fork") as mine:
                ok = mine is not pool and mine.submit(lambda: 41 + 1).result(timeout=5) == 42
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    assert os.read(read, 2) == b"ok" and status == 0
