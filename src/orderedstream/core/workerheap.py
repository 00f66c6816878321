"""Keep Spark's per-task garbage collection cheap in reused Python workers.

With ``spark.python.worker.reuse`` (Spark's default) ``pyspark.daemon`` runs a full
``gc.collect()`` in the worker after EVERY task. The pack's worker code imports pyarrow,
pyspark, s3fs/botocore (whose S3 service model alone is tens of thousands of dicts) and
delta-rs, so each of those collections walks ~90k-150k long-lived objects: measured 60-170 ms
of CPU after every task, in every process the pack's code runs in: executors' workers and the
driver-side Data Source planner and commit processes (on a 2-core machine about 3 s of CPU per
2M rows written by ``fenceddelta``, beside the tasks that do the work).

``freeze_worker_heap()`` moves the objects alive at that moment to the permanent generation
(``gc.freeze()``, O(1)), which later collections skip. Callers invoke it where a task or call
STARTS: after the previous task the daemon's collection has just run, so what is frozen is the
long-lived state (modules, clients, caches), not garbage. Frozen objects are still freed by
reference counting; only reference cycles among them are never collected. It does nothing
outside a reused Spark worker (a driver or a test process, a non-daemon worker): freezing a
user's own process is not this pack's decision.
"""

from __future__ import annotations

import gc
import os
import sys

_DAEMONS = ("pyspark.daemon", "orderedstream.core.pydaemon")


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
    returns whether it froze."""
    if not in_reused_worker():
        return False
    gc.freeze()
    return True


__all__ = ["freeze_worker_heap", "in_reused_worker"]
