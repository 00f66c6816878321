"""The driver's end without idle waits: a Spark session's stop, and the interpreter's exit.

``SparkSession.stop()`` stops the JVM's context, then shuts pyspark's accumulator server down
and waits for it. That server answers in a thread whose request handler polls the JVM's
connection once a second (the JVM keeps it open after its context stops) inside
``socketserver``'s polling loop: the stop waits for nothing
(docs/decisions/0019-quick-driver-exit.md). ``stop_session`` makes the same stop and leaves
that shutdown to a daemon thread: a process that ends next does not wait for it, and one that
goes on (a new session, a test) sees it finish in the background, as pyspark's own stop would
have finished it.

``freeze_heap_at_exit`` is for a program's entry point: the interpreter's exit runs several
full garbage collections over the whole heap (pyspark, pyarrow, the pack), most of a driver's
exit (docs/decisions/0019-quick-driver-exit.md). One collection, then ``gc.freeze()``, as the
last exit handler: garbage with finalizers is still finalized (files flushed), and the exit's
collections skip what is left, which the process's end frees anyway.
"""

from __future__ import annotations

import atexit
import gc
import threading
from typing import Any

THREAD_NAME = "orderedstream-accumulator-server-stop"


def stop_session(spark: Any) -> threading.Thread | None:
    """Stop ``spark`` with ``spark.stop()``, leaving the accumulator server's shutdown to a daemon
    thread.

    Parameters
    ----------
    spark
        The session to stop.

    Returns
    -------
    threading.Thread or None
        The thread shutting the accumulator server down, or None when the session had no such
        server (e.g. Spark Connect).

    Raises
    ------
    Exception
        Whatever ``spark.stop()`` raises (the server's shutdown is still started).

    Runs on
    -------
    driver
    """
    context: Any = getattr(spark, "_sc", None)
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        context._accumulatorServer = None  # pyspark's stop skips its waiting shutdown
    try:
        spark.stop()
    finally:
        finishing = None
        if server is not None:
            finishing = threading.Thread(target=server.shutdown, name=THREAD_NAME,
                                         daemon=True)
            finishing.start()
    return finishing


def freeze_heap_at_exit() -> None:
    """Register the collect-then-freeze exit handler. Call it first thing in a program's
    entry point: exit handlers run last-registered first, so it runs after the others."""
    atexit.register(_collect_then_freeze)


def _collect_then_freeze() -> None:
    gc.collect()
    gc.freeze()


__all__ = ["freeze_heap_at_exit", "stop_session"]
