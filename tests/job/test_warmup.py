"""The main job starts its Python workers while the query starts (``app.job.warmup``): the
modules are imported in real Spark workers, the tasks after it reuse those workers, and
``start_job`` runs it only when asked."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle

from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.app.job.pipeline import JobOptions, start_job
from orderedstream.app.job.warmup import (
    JOB_GROUP,
    planner_frame,
    warm_python_workers,
    warm_read_planner,
)
from orderedstream.dev.local.jvm import python_worker_pools, release_planner_workers
from orderedstream.statestore.ordered.plan import EXTRA_KEY
from tests.fixtures import unique

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MARKER = "tests.job.warm_marker"


def _report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import os
    import sys as worker_sys

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()],
                                      "marker": [MARKER in worker_sys.modules]})


def test_warm_up_imports_in_the_workers_later_tasks_reuse(spark: Any) -> None:
    parallelism = spark.sparkContext.defaultParallelism
    warm = warm_python_workers(spark, (MARKER, "orderedstream_no_such_module"))
    assert warm is not None and warm.wait(300)
    assert warm.error is None
    assert len(warm.workers) == parallelism and len(set(warm.workers)) == parallelism
    # a module a worker cannot import is reported, not raised (the task decides later)
    assert len(warm.missing) == 1 and "orderedstream_no_such_module" in warm.missing[0]

    # Enough tasks to go round every idle worker of the session's pools (earlier tests leave
    # some): whichever order Spark hands idle workers out in, the warm ones serve some
    tasks = python_worker_pools(spark).get("pyspark.worker", 0) + parallelism
    rows = spark.range(0, tasks, 1, tasks).mapInArrow(_report,
                                                      "pid long, marker boolean").collect()
    reused = [r for r in rows if r["pid"] in warm.workers]
    assert reused, (rows, warm.workers)  # the warm workers serve the next job's tasks
    assert all(r["marker"] for r in reused)  # ... with the warm-up's imports in place

    assert warm_python_workers(spark, (MARKER,), tasks=0) is None


def test_read_planner_started_ahead_is_the_only_planner_left(spark: Any) -> None:
    """What start_job does: the do-nothing read is created while the create planner is warm,
    the load planners are released, then planning the read starts the read planner alone."""
    planner = "pyspark.sql.worker."
    release_planner_workers(spark)  # earlier tests' planner pools
    frame = planner_frame(spark)
    assert frame is not None
    release_planner_workers(spark)
    thread = warm_read_planner(frame)
    thread.join(300)
    assert not thread.is_alive()
    pools = {m: n for m, n in python_worker_pools(spark).items() if m.startswith(planner)}
    assert pools.get(f"{planner}plan_data_source_read") == 1, pools
    assert all(n == 0 for m, n in pools.items() if not m.endswith("plan_data_source_read"))
    assert f"{planner}plan_data_source_read" in release_planner_workers(spark)


def _warm_jobs(spark: Any) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(JOB_GROUP))


def _run_once(spark: Any, kafka: Any, s3: Any, tmp_path: Path, **options: Any
              ) -> tuple[Any, Any]:
    prefix = unique("warm")
    generate(kafka.bootstrap, GeneratorOptions(prefix=prefix, sites=1, late_sites=0,
                                               partitions=2, sessions_per_site=2, rows=2,
                                               updates=4, seed=8),
             create_topic=kafka.create_topic)
    base = s3.url(unique("warmjob"))
    opts = JobOptions(bootstrap=kafka.bootstrap, output=f"{base}/output",
                      state_location=f"{base}/state", checkpoint=str(tmp_path / "checkpoint"),
                      topic_pattern=f"{prefix}-.*", storage_options=s3.storage_options,
                      query_name=unique("warmq"), **options)
    query, processor = start_job(spark, opts, once=True)
    try:
        query.awaitTermination(600)
    finally:
        query.stop()
    assert query.exception() is None
    return query, processor


def test_start_job_runs_one_warm_up_job_and_batch_0_records_its_workers(
        spark: Any, kafka: Any, s3: Any, tmp_path: Path) -> None:
    before = _warm_jobs(spark)
    _query, processor = _run_once(spark, kafka, s3, tmp_path)
    new = _warm_jobs(spark) - before
    assert len(new) == 1
    info = spark.sparkContext.statusTracker().getJobInfo(next(iter(new)))
    assert info is not None and info.status == "SUCCEEDED"
    # batch 0's partition tasks ran in Python workers (their pids are in the commit record)
    tasks = processor.log.get(0).extra[EXTRA_KEY]["tasks"]
    assert tasks and all(int(t["metrics"]["pid"]) > 0 for t in tasks.values())


def test_start_job_without_warm_up_runs_no_warm_up_job(spark: Any, kafka: Any, s3: Any,
                                                       tmp_path: Path) -> None:
    before = _warm_jobs(spark)
    _run_once(spark, kafka, s3, tmp_path, warm_workers=False)
    assert _warm_jobs(spark) == before
