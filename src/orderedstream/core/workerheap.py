"""Keep a reused Python worker's heap cheap: Spark's per-task garbage collection, and the C
heap's free pages after a large read.

``freeze_worker_heap()`` moves the objects alive at that moment to the permanent generation
(``gc.freeze()``), which later collections skip (``pyspark.daemon`` runs a full one after every
task). Callers invoke it where a sink's task or call starts; it does nothing outside a reused
Spark worker (docs/decisions/0025-freeze-reused-worker-heap.md).

``release_freed_memory()`` hands the C heap's free pages back to the system after a large
Kafka range (docs/decisions/0015-memory-bound-per-worker.md).

Both change the whole process, so both do nothing unless ``ORDEREDSTREAM_PROCESS_TUNING=1``
(``orderedstream.core.tuning``).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
from typing import Any

from orderedstream.core.tuning import process_tuning

_DAEMONS = ("pyspark.daemon", "orderedstream.dev.local.pydaemon")


def in_reused_worker() -> bool:
    """True in a Python worker forked by Spark's daemon with worker reuse on (the daemon then
    collects garbage after every task)."""
    if os.environ.get("SPARK_REUSE_WORKER", "") in ("", "0", "false"):
        return False
    # The process's main module, not what it imported: a driver or a test process may
    # import pyspark.daemon (or the pack's daemon) without being one of its workers.
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name in _DAEMONS


def freeze_worker_heap() -> bool:
    """In a reused Spark worker, freeze the objects alive now (see the module docstring);
    returns whether it froze (never without ``ORDEREDSTREAM_PROCESS_TUNING=1``)."""
    if not process_tuning() or not in_reused_worker():
        return False
    gc.freeze()
    return True


RELEASE_AFTER_RECORDS = 20_000
"""Records of one Kafka range past which its reader gives freed memory back
(:func:`release_freed_memory`); smaller ranges leave little behind and are often many."""


def release_freed_memory() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``).

    librdkafka's fetch buffers and the Arrow batches made from them are allocated and freed by
    several threads, and glibc keeps what they free in its arenas for reuse: a reused worker
    held that memory after a large range until a later range happened to reuse it. A trim walks
    the arenas' free chunks, which costs more with a larger heap, so readers call it after large
    ranges only (:data:`RELEASE_AFTER_RECORDS`; why:
    docs/decisions/0015-memory-bound-per-worker.md).

    Returns
    -------
    bool
        Whether it trimmed: False without ``ORDEREDSTREAM_PROCESS_TUNING=1`` or where the C
        library has no such call.

    Runs on
    -------
    executor (the range reader)
    """
    trim = glibc_function("malloc_trim") if process_tuning() else None
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


@functools.cache
def glibc_function(name: str) -> Any:
    """glibc's function ``name`` from the C library already loaded in this process (a ctypes
    function, cached and shared by its callers).

    Parameters
    ----------
    name
        The C function's name, e.g. ``"malloc_trim"``.

    Returns
    -------
    Any
        The ctypes function, or None off Linux or where the C library has none (e.g. musl's
        lacks ``malloc_trim``).

    Runs on
    -------
    both
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


__all__ = ["RELEASE_AFTER_RECORDS", "freeze_worker_heap", "glibc_function",
           "in_reused_worker", "release_freed_memory"]
