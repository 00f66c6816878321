"""The ordered stage's automatic state retention, run by a driver thread off the batch's path.

Why: a cleanup lists the whole state location, reads the manifests committed since the
previous cleanup and deletes what no retained batch record names. Run inside the batch that
was due, it delayed every ``cleanup_interval_batches``-th batch by all of that: 300-400 ms of a
600 ms batch in the 12 x 100 small-batch benchmark against a local S3, and a LIST per 1,000
objects of the state location on a real bucket. Retention is safe beside a running query
(``orderedstream.statestore.ordered.retention``: it never deletes what a batch after the
record it read can need), so, like Spark's state store maintenance thread, the due batch only
starts it.

One cleanup runs at a time. A cleanup due while the previous one still runs is skipped (the
next due one does the work); an explicit ``OrderedStateful.cleanup_state`` waits for the
running one. The thread reads the commit log through its own ``log`` object, so it shares no
cache with the batches. A background failure is logged as a warning and never fails a
batch; a driver that exits mid-cleanup leaves what the next cleanup finishes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from orderedstream.statestore.ordered.retention import (
    OrderedRetention,
    RetentionPolicy,
    RetentionResult,
)

_log = logging.getLogger("orderedstream.statestore.ordered")


class StateCleanups:
    """Runs an ``OrderedRetention`` now (:meth:`run`) or in a daemon thread (:meth:`start`),
    one at a time; :attr:`last` is the newest finished cleanup's result."""

    def __init__(self, make: Callable[[], OrderedRetention], *, location: str) -> None:
        self._make = make
        self._location = location
        self._retention: OrderedRetention | None = None
        self._lock = threading.Lock()  # held while a cleanup runs
        self.last: RetentionResult | None = None
        self.last_error: Exception | None = None
        """The exception of the newest background cleanup that failed (None after a success)."""

    def __getstate__(self) -> dict[str, object]:
        # The lock and the thread stay in this driver (the processor pickles for Spark Connect).
        return {"make": self._make, "location": self._location}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["make"], location=state["location"])  # type: ignore[misc, arg-type]

    def run(self, keep_batches: int) -> RetentionResult:
        """Clean up now, after the running background cleanup if there is one."""
        with self._lock:
            return self._run(keep_batches)

    def _run(self, keep_batches: int) -> RetentionResult:
        if self._retention is None:
            self._retention = self._make()
        result = self._retention.run(keep_batches)
        self.last, self.last_error = result, None
        return result

    def start(self, keep_batches: int, batch_id: int) -> bool:
        """Start a cleanup in the background after batch ``batch_id``'s commit; False (and
        nothing started) while the previous one still runs."""
        if not self._lock.acquire(blocking=False):
            _log.warning("state cleanup after batch %s at %s skipped: the previous one still "
                         "runs (the next due batch starts another)", batch_id, self._location)
            return False

        def work() -> None:
            try:
                self._run(keep_batches)
            except Exception as exc:  # noqa: BLE001 - a cleanup must never fail the query
                self.last_error = exc
                _log.warning("state cleanup after batch %s at %s failed (the batch is "
                             "committed; the next cleanup retries): %s: %s", batch_id,
                             self._location, type(exc).__name__, exc)
            finally:
                self._lock.release()

        try:
            thread = threading.Thread(target=work, name=f"orderedstream-cleanup-b{batch_id}",
                                      daemon=True)
            thread.start()
        except BaseException:
            self._lock.release()
            raise
        return True

    def after_batch(self, policy: RetentionPolicy, batch_id: int) -> RetentionResult | None:
        """The automatic cleanup after committing ``batch_id`` when ``policy`` says it is due:
        started in the background (None), or run now and its result. Best effort: a failure
        is logged as a warning, never raised into the committed batch."""
        if not policy.due(batch_id):
            return None
        try:
            if policy.background:
                self.start(policy.keep_batches, batch_id)
                return None
            return self.run(policy.keep_batches)
        except Exception as exc:  # noqa: BLE001 - cleanup must never fail a committed batch
            _log.warning("state cleanup after batch %s at %s failed (the batch is committed; "
                         "the next cleanup retries): %s: %s", batch_id, self._location,
                         type(exc).__name__, exc)
            return None

    def result(self, timeout: float | None = None) -> RetentionResult | None:
        """The newest finished cleanup's result once none runs (None: none yet, or the newest
        failed); TimeoutError when one still runs after ``timeout`` seconds."""
        if not self.wait(timeout):
            raise TimeoutError(f"the state cleanup at {self._location} still runs after "
                               f"{timeout} s")
        return None if self.last_error is not None else self.last

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for the running cleanup (background
        or not); True when none runs any more."""
        if not self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        self._lock.release()
        return True


__all__ = ["StateCleanups"]
