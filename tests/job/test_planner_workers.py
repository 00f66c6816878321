"""Spark's planner Python pools (``pyspark.sql.worker.*``: a ``pyspark.daemon`` and an idle
worker per module, kept until the SparkEnv stops) are released once a query has planned, and
Spark plans again afterwards: a new read, a restarted query in the same session."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader

from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.app.job.pipeline import JobOptions, committed_offsets, start_job
from orderedstream.dev.local.jvm import python_worker_pools, release_planner_workers
from tests.fixtures import unique

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PLANNER = "pyspark.sql.worker."


class _OneRowReader(DataSourceReader):
    def read(self, partition: Any) -> Iterator[tuple[int]]:
        yield (1,)


class _OneRowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "orderedstream_test_one_row"

    def schema(self) -> str:
        return "x int"

    def reader(self, schema: Any) -> DataSourceReader:
        return _OneRowReader()


def _planner_daemons() -> list[str]:
    """Command lines of the ``pyspark.daemon`` processes of planner modules under this
    session's driver JVM (not under other Spark processes this test run started, such as the
    Spark Connect server of ``tests/connect``)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    assert session is not None
    jvm_pid = int(session._jvm.java.lang.ProcessHandle.current().pid())
    found = []
    for proc in psutil.Process(jvm_pid).children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "-m pyspark.daemon" in cmd and PLANNER in cmd:
            found.append(cmd)
    return found


def _planner_workers(spark: Any) -> dict[str, int]:
    return {m: n for m, n in python_worker_pools(spark).items() if m.startswith(PLANNER)}


def test_release_stops_idle_planner_pools_and_spark_plans_again(spark: Any) -> None:
    spark.dataSource.register(_OneRowSource)
    assert [r.x for r in spark.read.format("orderedstream_test_one_row").load().collect()] == [1]
    before = _planner_workers(spark)
    assert before.get(f"{PLANNER}create_data_source", 0) >= 1, before
    assert _planner_daemons()

    others = {m: n for m, n in python_worker_pools(spark).items() if not m.startswith(PLANNER)}
    assert others.get("pyspark.worker", 0) >= 1, others  # the read's own worker
    released = release_planner_workers(spark)
    assert f"{PLANNER}create_data_source" in released
    assert f"{PLANNER}plan_data_source_read" in released
    assert set(_planner_workers(spark).values()) == {0}
    deadline = time.monotonic() + 10
    while _planner_daemons() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _planner_daemons() == []
    assert release_planner_workers(spark) == []  # nothing left to stop
    # the tasks' own pool (pyspark.worker) is not a planner pool: left alone
    assert {m: n for m, n in python_worker_pools(spark).items()
            if not m.startswith(PLANNER)} == others

    # Spark plans again: the factories start their daemons anew
    assert [r.x for r in spark.read.format("orderedstream_test_one_row").load().collect()] == [1]
    assert _planner_workers(spark).get(f"{PLANNER}create_data_source", 0) >= 1
    assert f"{PLANNER}create_data_source" in release_planner_workers(spark)


def _run_until(query: Any, topics_end: dict[str, dict[int, int]], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if committed_offsets(query) == topics_end:
            return
        time.sleep(0.5)
    raise AssertionError(f"query did not reach {topics_end}: {committed_offsets(query)}")


def _end_offsets(bootstrap: str, prefix: str) -> dict[str, dict[int, int]]:
    from orderedstream.app.job.pipeline import kafka_end_offsets

    return kafka_end_offsets(bootstrap, f"{prefix}-.*")


def _assert_load_planners_released(spark: Any) -> None:
    pools = _planner_workers(spark)
    for step in ("lookup_data_sources", "create_data_source"):
        assert pools.get(f"{PLANNER}{step}", 0) == 0, pools


def test_main_job_releases_planner_pools_and_a_restarted_query_plans_again(
        spark: Any, kafka: Any, s3: Any, tmp_path: Path) -> None:
    prefix = unique("plannerpools")
    wave = GeneratorOptions(prefix=prefix, sites=1, late_sites=0, partitions=2,
                            sessions_per_site=3, rows=3, updates=6, seed=3)
    generate(kafka.bootstrap, wave, create_topic=kafka.create_topic)
    base = s3.url(unique("plannerjob"))
    opts = JobOptions(bootstrap=kafka.bootstrap, output=f"{base}/output",
                      state_location=f"{base}/state", checkpoint=str(tmp_path / "checkpoint"),
                      topic_pattern=f"{prefix}-.*", storage_options=s3.storage_options,
                      trigger="1 second")
    query, _ = start_job(spark, opts)
    try:
        # load()'s planner steps were released before the query started its source runner
        # and the stage's workers (plan_data_source_read, run by the query, goes at batch 0)
        _assert_load_planners_released(spark)
        _run_until(query, _end_offsets(kafka.bootstrap, prefix))
        # the batch function released the pools before its stage ran; none came back since
        assert set(_planner_workers(spark).values()) <= {0}, _planner_workers(spark)
        assert _planner_daemons() == []
    finally:
        query.stop()

    # a restart in the same session (what --max-restarts does): Spark plans the source again
    generate(kafka.bootstrap, GeneratorOptions(prefix=prefix, sites=1, late_sites=0,
                                               partitions=2, sessions_per_site=2, rows=3,
                                               updates=4, seed=4, session_tag="b"))
    query, _ = start_job(spark, opts)
    try:
        _assert_load_planners_released(spark)
        _run_until(query, _end_offsets(kafka.bootstrap, prefix))
        assert set(_planner_workers(spark).values()) <= {0}, _planner_workers(spark)
        assert _planner_daemons() == []
    finally:
        query.stop()


def _close_idle_workers_as_spark_does(spark: Any, module: str) -> int:
    """What Spark's idle monitor does to a pool idle for a minute: its idle workers' sockets
    are closed and they leave the idle queue, but stay in the factory's weak map of workers
    until a garbage collection. The number of pools found for ``module``."""
    # By fields only: listing SparkEnv's methods (py4j's lookup, getMethod) loads classes
    # (protobuf) that are not on the driver's class path.
    reflect = spark._jvm.java.lang.Class
    companion = reflect.forName("org.apache.spark.SparkEnv$")
    current = companion.getDeclaredField("env")
    current.setAccessible(True)
    env = current.get(companion.getDeclaredField("MODULE$").get(None))
    field = reflect.forName("org.apache.spark.SparkEnv").getDeclaredField("pythonWorkers")
    field.setAccessible(True)
    found = 0
    entries = field.get(env).iterator()
    while entries.hasNext():
        entry = entries.next()
        if entry._1().workerModule() == module:
            # private[spark] in Scala, public (name-mangled) in the bytecode
            cleanup = "org$apache$spark$api$python$PythonWorkerFactory$$cleanupIdleWorkers"
            getattr(entry._2(), cleanup)()
            found += 1
    return found


def test_a_pool_whose_idle_worker_spark_closed_is_still_released(spark: Any) -> None:
    """A worker closed by Spark's idle monitor is gone, not in use: the pool that started a
    new worker since is released (it once counted as busy until a GC, and the pool stayed)."""
    spark.dataSource.register(_OneRowSource)
    module = f"{PLANNER}plan_data_source_read"
    assert [r.x for r in spark.read.format("orderedstream_test_one_row").load().collect()] == [1]
    assert _planner_workers(spark).get(module, 0) >= 1
    assert _close_idle_workers_as_spark_does(spark, module) >= 1  # a pool per worker env
    assert _planner_workers(spark).get(module) == 0  # the closed worker is not counted

    # the next plan forks a new worker next to the closed one still in the weak map
    assert [r.x for r in spark.read.format("orderedstream_test_one_row").load().collect()] == [1]
    assert _planner_workers(spark).get(module) == 1
    assert module in release_planner_workers(spark)
    assert set(_planner_workers(spark).values()) == {0}
