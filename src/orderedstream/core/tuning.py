"""The pack's process tuning: changes to a whole Python process, off unless turned on.

A library must not change the process it runs in. These changes do, so the pack makes them
only where ``ORDEREDSTREAM_PROCESS_TUNING=1`` is in the process's environment:

- glibc's malloc: one arena and a fixed 128 KiB mmap threshold, set before RocksDB starts its
  threads (``statestore.rocksdb.options``); a heap trim (``malloc_trim``) after a large Kafka
  range (``core.workerheap.release_freed_memory``);
- ``gc.freeze()`` of a reused Spark worker's long-lived heap when a sink's task or call starts
  (``core.workerheap.freeze_worker_heap``);
- an import hook on ``sys.meta_path`` that keeps pandas out of pyarrow until something imports
  it (``core.pandaslazy``);
- RocksDB partitions kept open after ``close`` and handed between a machine's Python workers
  over a Unix socket served by a daemon thread (``statestore.rocksdb.keepopen``);
- in the main job (``app.job.pipeline``), when the session installed its tuning
  (:func:`install_session_tuning`; only the embedded local session and the development
  sessions do, ``orderedstream.dev.local.jvm``): one pool of Python workers for the source and
  the stage, a warm-up job, the release of Spark's idle planner workers and the checkpoint file
  manager without helper processes.

Without the variable every feature works the same, with the same guarantees; only memory and
CPU differ. One variable reaches every process the pack's code runs in: set it in the driver's
environment and give it to the executors' Python workers with
``--conf spark.executorEnv.ORDEREDSTREAM_PROCESS_TUNING=1`` (in local mode the workers inherit
the driver's environment). The embedded local session (``orderedstream.dev.embedded_session``:
the demo, ``orderedstream run`` without ``--master``) turns it on for its own processes.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

ENV = "ORDEREDSTREAM_PROCESS_TUNING"
"""The environment variable that turns the process tuning on: ``1``, ``true``, ``yes`` or
``on``."""

_ON = ("1", "true", "yes", "on")


def process_tuning() -> bool:
    """Whether this process may be tuned (``ORDEREDSTREAM_PROCESS_TUNING=1``); read each time,
    so a process that sets it before the pack's first use gets it."""
    return os.environ.get(ENV, "").strip().lower() in _ON


class SessionTuning(Protocol):
    """What a session's own tuning does to the main job's query (driver side). The library
    code asks for it through :func:`session_tuning` and works the same without it."""

    def share_python_workers(self, spark: Any) -> bool:
        """Let the source's reads and the stage share one pool of Python workers.

        Parameters
        ----------
        spark
            The job's session.

        Returns
        -------
        bool
            True if the pool is shared.
        """
        ...

    def release_planner_workers(self, spark: Any) -> list[str]:
        """Stop Spark's idle planner workers.

        Parameters
        ----------
        spark
            The job's session.

        Returns
        -------
        list[str]
            The worker modules whose workers were released.
        """
        ...

    def start_query(self, spark: Any, writer: Any, checkpoint: str) -> Any:
        """``writer.start()``, as this session starts a query.

        Parameters
        ----------
        spark
            The job's session.
        writer
            The query's ``DataStreamWriter``.
        checkpoint
            The query's checkpoint location.

        Returns
        -------
        StreamingQuery
            The started query.
        """
        ...

    def batch_started(self) -> None:
        """Called by the main job's batch function before each batch."""
        ...


_installed: SessionTuning | None = None


def install_session_tuning(tuning: SessionTuning | None) -> None:
    """Make ``tuning`` this process's session tuning; called by the session that owns it
    (``orderedstream.dev.embedded_session``), never by a library.

    Parameters
    ----------
    tuning
        The tuning, or None for none.

    Runs on
    -------
    driver
    """
    global _installed
    _installed = tuning


def session_tuning() -> SessionTuning | None:
    """The installed session tuning while the process tuning is on, else None."""
    return _installed if process_tuning() else None


__all__ = ["ENV", "SessionTuning", "install_session_tuning", "process_tuning",
           "session_tuning"]
