"""Start the job's Python workers while its query starts, not inside its first batch.

A Spark Python worker is started (forked by the daemon, which starts first) by the first task
that needs it, and that task then imports what it runs: pyspark's worker, pyarrow, the Kafka
reader, RocksDB, the ordered stage and the user function's module. Without a warm-up the
main job paid that inside batch 0: the source's range task started the daemon and a worker,
then the stage's tasks a second worker, each importing its modules before reading its first
record (docs/decisions/0006-warm-workers.md).

``warm_python_workers`` submits, before the query starts, one small Spark job whose
``defaultParallelism`` tasks import those modules in the workers the query's tasks then reuse
(``spark.python.worker.reuse``, Spark's default; the source's and the stage's functions share
one pool in local mode: ``orderedstream.dev.local.jvm.share_python_workers``). It does not wait for
the job to finish, only for Spark to have it queued: the query's first tasks are scheduled
after its tasks, so they take the warm workers instead of forking more (no more workers than
before, so no more memory). A failure to warm only logs: the batch starts the workers itself,
as before.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from orderedstream.core.pandaslazy import keep_pandas_lazy

_log = logging.getLogger(__name__)

JOB_GROUP = "orderedstream-warm-python-workers"

STAGE_MODULES = (
    "pyarrow.parquet",
    "orderedstream.python_datasource.source",
    "orderedstream.python_datasource.reader",
    "orderedstream.python_datasource.consumer_pool",
    "orderedstream.statestore.ordered.inplan",
    "orderedstream.statestore.ordered.runner",
    "orderedstream.statestore.ordered.state_access",
    "orderedstream.statestore.rocksdb.store",
    "orderedstream.core.objectstore",
    "orderedstream.core.lazys3",
)
"""What a task of the main job's source and ordered stage imports before its first record."""


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (Spark's carry a JVM trace), else its class."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Importer:
    """The warm-up job's ``mapInArrow`` function: import ``modules`` in this worker; one row
    (the worker's pid, what could not be imported). Picklable by reference."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = tuple(modules)

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        import os

        import pyarrow as pa

        keep_pandas_lazy()  # as the job's own tasks: pa.array must not import pandas
        for _batch in batches:  # one row per task: consume it
            pass
        missing = []
        for name in self.modules:
            try:
                importlib.import_module(name)
            except ImportError as exc:  # e.g. the native reader not built: the task decides
                missing.append(f"{name}: {exc}")
        yield pa.RecordBatch.from_arrays([pa.array([os.getpid()], pa.int64()),
                                          pa.array(["; ".join(missing)], pa.string())],
                                         names=["pid", "missing"])


@dataclass
class WarmUp:
    """A warm-up under way: ``wait_queued()`` until Spark has its job, ``wait()`` for it; then
    ``workers`` (the pids that imported the modules), ``missing`` (modules a worker could not
    import, with the reason) and ``error`` (why the job failed, None when it ran)."""

    thread: threading.Thread
    tracker: Any
    earlier: set[int]
    workers: list[int] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    error: str | None = None

    def wait_queued(self, timeout: float = 5.0) -> bool:
        """Block until Spark has the warm-up's job: jobs submitted after that run their tasks
        after its tasks, in its workers.

        Parameters
        ----------
        timeout
            Seconds to wait at most.

        Returns
        -------
        bool
            False on the timeout (True too when the warm-up is already over)."""
        deadline = time.monotonic() + timeout
        while self.thread.is_alive() and time.monotonic() < deadline:
            if set(self.tracker.getJobIdsForGroup(JOB_GROUP)) - self.earlier:
                return True
            time.sleep(0.005)
        return not self.thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the warm-up job to be over (ran or failed).

        Parameters
        ----------
        timeout
            Seconds to wait at most; None: until it is over.

        Returns
        -------
        bool
            True once it is over."""
        self.thread.join(timeout)
        return not self.thread.is_alive()


def warm_python_workers(spark: Any, modules: Sequence[str], *, tasks: int | None = None,
                        queued_within: float | None = 5.0) -> WarmUp | None:
    """Start ``tasks`` (default: ``defaultParallelism``) Python workers importing ``modules``,
    in the background (None when ``tasks`` < 1). Returns once Spark has the job queued (at most
    ``queued_within`` seconds; None: at once, call ``WarmUp.wait_queued`` before the jobs that
    should find the workers warm), so that jobs submitted after that run their tasks after the
    warm-up's, in its workers (docs/decisions/0006-warm-workers.md).

    Parameters
    ----------
    spark
        The classic Spark session.
    modules
        The modules each worker imports.
    tasks
        How many workers; None: ``defaultParallelism``.
    queued_within
        Seconds to wait for the job to be queued; None: do not wait.

    Returns
    -------
    WarmUp or None
        The running warm-up; None when ``tasks`` < 1.

    Runs on
    -------
    driver (the job's tasks import on the executors)"""
    sc = spark.sparkContext
    count = tasks if tasks is not None else int(sc.defaultParallelism)
    if count < 1:
        return None
    began = time.perf_counter()

    def run() -> None:
        try:
            sc.setJobGroup(JOB_GROUP, "orderedstream: start the job's Python workers",
                           interruptOnCancel=False)
            # A SQL Python function, not an RDD one: Spark keys its worker pools by the
            # function's environment, and SQL runners add one an RDD runner lacks
            # (SPARK_SIMPLIFIED_TRACEBACK), so only a SQL function's workers are the ones the
            # source's and the stage's tasks reuse.
            results = spark.range(0, count, 1, count).mapInArrow(
                _Importer(modules), "pid long, missing string").collect()
        except Exception as exc:  # noqa: BLE001 - the batch starts its workers itself
            warm.error = _first_line(exc)
            _log.info("Python workers not started ahead of the query: %s", warm.error)
            return
        warm.workers = [int(row["pid"]) for row in results]
        warm.missing = sorted({row["missing"] for row in results if row["missing"]})
        _log.info("%d Python workers started ahead of the query in %.2f s%s", len(results),
                  time.perf_counter() - began,
                  f" (not imported: {warm.missing})" if warm.missing else "")

    tracker = sc.statusTracker()
    warm = WarmUp(threading.Thread(target=run, name="orderedstream-warm-workers", daemon=True),
                  tracker, set(tracker.getJobIdsForGroup(JOB_GROUP)))  # a restart's earlier
    warm.thread.start()
    if queued_within is not None:
        warm.wait_queued(queued_within)
    return warm


PLANNER_SOURCE = "orderedstream_warm_planner"


def _planner_source() -> type:
    """A Python Data Source that reads nothing: one partition, never read (built on first use:
    pyspark.sql is heavy)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class WarmPlannerReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0)]

        def read(self, partition: Any) -> Iterator[tuple[int]]:
            return iter(())

    class WarmPlannerSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return PLANNER_SOURCE

        def schema(self) -> str:
            return "x int"

        def reader(self, schema: Any) -> DataSourceReader:
            return WarmPlannerReader()

    return WarmPlannerSource


def planner_frame(spark: Any) -> Any:
    """A read of a Python Data Source that reads nothing, created now (Spark's create planner
    step runs here, in the pool the query's ``load()`` just used) and planned later by
    :func:`warm_read_planner`; None when it could not be created (batch 0 then starts its read
    planner itself, as without it).

    Parameters
    ----------
    spark
        The classic Spark session.

    Runs on
    -------
    driver"""
    try:
        spark.dataSource.register(_planner_source())
        return spark.read.format(PLANNER_SOURCE).load()
    except Exception as exc:  # noqa: BLE001 - only a start-up shortcut
        _log.info("Spark's read planner will start at batch 0: %s", _first_line(exc))
        return None


def warm_read_planner(frame: Any) -> threading.Thread:
    """Plan ``frame``'s read (:func:`planner_frame`) in the background: Spark starts its read
    planner (``pyspark.sql.worker.plan_data_source_read``: a daemon and a worker importing
    pyspark.sql), which a streaming query otherwise starts inside its first batch to plan its
    Python source's reads; the query then finds that worker idle
    (docs/decisions/0006-warm-workers.md).

    Parameters
    ----------
    frame
        What :func:`planner_frame` gave.

    Returns
    -------
    threading.Thread
        The daemon thread planning it; a failure is logged, never raised.

    Runs on
    -------
    driver"""

    def run() -> None:
        began = time.perf_counter()
        try:
            frame.rdd.getNumPartitions()  # plans the read; runs no task
        except Exception as exc:  # noqa: BLE001 - the query starts its planner itself
            _log.info("Spark's read planner not started ahead of the query: %s",
                      _first_line(exc))
            return
        _log.info("Spark's read planner started ahead of the query in %.2f s",
                  time.perf_counter() - began)

    thread = threading.Thread(target=run, name="orderedstream-warm-planner", daemon=True)
    thread.start()
    return thread


__all__ = ["JOB_GROUP", "PLANNER_SOURCE", "STAGE_MODULES", "WarmUp", "planner_frame",
           "warm_python_workers", "warm_read_planner"]
