"""The ordered stage's automatic state retention, run by a driver thread off the batch's path.

A cleanup lists the state location, reads the manifests committed since the previous one and
deletes what no retained batch record names: run inside the due batch it delayed that batch
by all of it. Retention is safe beside a running query (``ordered.retention``), so, like
Spark's state store maintenance thread, the due batch only starts it.
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
    one at a time; :attr:`last` is the newest finished cleanup's result.

    A cleanup due while the previous one still runs is skipped (the next due one does the
    work); an explicit :meth:`run` waits for the running one. The retention reads the commit
    log through its own ``log`` object, sharing no cache with the batches. A background
    failure is logged as a warning and never fails a batch; a driver that exits mid-cleanup
    leaves what the next cleanup finishes.

    Parameters
    ----------
    make
        Builds the ``OrderedRetention`` (called once, on the first cleanup).
    location
        The state location, for log messages."""

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
        """Clean up now, after the running background cleanup if there is one.

        Parameters
        ----------
        keep_batches
            How many of the newest batches' state stays restorable.

        Returns
        -------
        RetentionResult
            What the cleanup deleted and kept.

        Raises
        ------
        Exception
            What the retention raised (storage errors, a damaged commit log).

        Runs on
        -------
        driver"""
        with self._lock:
            return self._run(keep_batches)

    def _run(self, keep_batches: int) -> RetentionResult:
        if self._retention is None:
            self._retention = self._make()
        result = self._retention.run(keep_batches)
        self.last, self.last_error = result, None
        return result

    def start(self, keep_batches: int, batch_id: int) -> bool:
        """Start a cleanup in a daemon thread after a batch's commit.

        Parameters
        ----------
        keep_batches
            How many of the newest batches' state stays restorable.
        batch_id
            The batch just committed (names the thread and the log messages).

        Returns
        -------
        bool
            True when started; False (a warning logged) while the previous one still runs.

        Runs on
        -------
        driver"""
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
        """The automatic cleanup after a batch's commit, when ``policy`` says it is due.

        Best effort: a failure is logged as a warning, never raised into the committed batch.

        Parameters
        ----------
        policy
            When cleanups are due, how many batches to keep, whether in the background.
        batch_id
            The batch just committed.

        Returns
        -------
        RetentionResult | None
            The result of a cleanup run now; ``None`` when none was due, it was started in
            the background, or it failed.

        Runs on
        -------
        driver"""
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
        """The newest finished cleanup's result, once none runs.

        Parameters
        ----------
        timeout
            Seconds to wait for the running cleanup; ``None``: no limit.

        Returns
        -------
        RetentionResult | None
            ``None`` when no cleanup finished yet or the newest one failed
            (see ``last_error``).

        Raises
        ------
        TimeoutError
            A cleanup still runs after ``timeout`` seconds.

        Runs on
        -------
        driver"""
        if not self.wait(timeout):
            raise TimeoutError(f"the state cleanup at {self._location} still runs after "
                               f"{timeout} s")
        return None if self.last_error is not None else self.last

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running cleanup (background or not) to finish.

        Parameters
        ----------
        timeout
            Seconds to wait at most; ``None``: no limit.

        Returns
        -------
        bool
            True when none runs any more, False when one still runs after ``timeout``.

        Runs on
        -------
        driver"""
        if not self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        self._lock.release()
        return True


__all__ = ["StateCleanups"]
