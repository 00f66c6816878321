"""Executor-sticky placement on the standalone cluster (2 workers, one 1-core executor each).

A streaming query reads a Python streaming source with 4 partitions per micro-batch (Python
Data Source partitions carry no preferred locations, like orderedkafka's) and runs a narrow
mapInArrow stage on each batch in foreachBatch; every task reports the executor it ran on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from orderedstream.core.jvm import Placement
from orderedstream.dev.services.process import wait_until
from tests.fixtures import unique
from tests.shim.shim_helpers import STAGE_SCHEMA, executor_stage, register_batches_source

pytestmark = pytest.mark.cluster

PARTITIONS = 4


@dataclass
class BatchRecord:
    batch_id: int
    planned: dict[int, str]          # partition -> executor the shim preferred
    ran: dict[int, str]              # partition -> executor the task reported (executor side)
    learned: dict[str, str]          # key -> executor the driver's listener recorded


@dataclass
class Run:
    prefix: str
    prefer: bool
    records: list[BatchRecord] = field(default_factory=list)

    def key(self, partition: int) -> str:
        return f"{self.prefix}/p{partition}"


def _run_query(spark: Any, checkpoint: Path, batches: int, run: Run, placement: Placement,
               after_batch: Callable[[int], None] = lambda batch_id: None) -> None:
    """Run ``batches`` micro-batches; with ``run.prefer`` the stage's tasks get preferences,
    without it the shim only observes (no preferred locations: Spark's own placement)."""
    source = register_batches_source(spark)
    stage = executor_stage()

    def on_batch(batch_df: Any, batch_id: int) -> None:
        tag = f"{run.prefix}:{batch_id}"
        keys = {p: run.key(p) for p in range(PARTITIONS)} if run.prefer else {}
        placed = placement.prefer(batch_df, keys, tag=tag)
        rows = placed.mapInArrow(stage, STAGE_SCHEMA).collect()
        assert sorted((r.partition, r.rows) for r in rows) == [(p, 10) for p in range(PARTITIONS)]
        ran = {r.partition: r.executor for r in rows}
        planned = placement.planned(tag)
        observed = placement.observed(tag)
        assert observed == ran, "the driver's listener and the tasks disagree on executors"
        learned = placement.commit(tag)
        run.records.append(BatchRecord(batch_id, planned, ran, learned))
        after_batch(batch_id)

    stream = (spark.readStream.format(source).option("partitions", str(PARTITIONS))
              .option("batches", str(batches)).load())
    query = (stream.writeStream.foreachBatch(on_batch)
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert [r.batch_id for r in run.records] == list(range(batches))


def _two_executors(placement: Placement) -> dict[str, str]:
    """The cluster's two executors, once both registered (a fresh session starts without)."""
    wait_until(lambda: len(placement.executors()) == 2, 180,
               "both workers' executors to register with the driver")
    return placement.executors()


def _stayed(records: list[BatchRecord]) -> tuple[int, int]:
    """(tasks that ran where the same partition ran the batch before, tasks compared)."""
    stayed = compared = 0
    for before, after in pairwise(records):
        for partition, executor in after.ran.items():
            compared += 1
            stayed += executor == before.ran[partition]
    return stayed, compared


@pytest.mark.slow  # the ordered stage's placement test covers the same path end to end
def test_tasks_stay_on_the_executor_that_holds_their_state(cluster_spark: Any,
                                                           shim_jar: Path,
                                                           tmp_path: Path) -> None:
    placement = Placement(cluster_spark)
    assert placement.available, "the cluster session started without the shim jar"
    executors = _two_executors(placement)
    run = Run(unique("sticky"), prefer=True)
    _run_query(cluster_spark, tmp_path / "checkpoint", 5, run, placement)

    first = run.records[0]
    assert Counter(first.planned.values()) == Counter({e: 2 for e in executors}), \
        "new partitions are spread evenly"
    for record in run.records:
        assert record.learned == {run.key(p): e for p, e in record.ran.items()}
    for before, after in pairwise(run.records):
        assert after.planned == before.ran, \
            f"batch {after.batch_id} must prefer where each partition committed last"
        assert after.ran == after.planned, \
            f"batch {after.batch_id}: tasks ran on {after.ran}, preferred {after.planned}"
    stayed, compared = _stayed(run.records)
    print(f"with the shim: {stayed}/{compared} tasks ran on the executor holding their state")
    assert stayed == compared


# Slow: the control of the placement tests; the sticky placement itself stays in CI
# (test_ordered_placement, and the lost-executor case below).
@pytest.mark.slow
def test_without_preferences_tasks_scatter(cluster_spark: Any, shim_jar: Path,
                                           tmp_path: Path) -> None:
    """What the pack gets without the jar: Spark places each batch's tasks afresh."""
    placement = Placement(cluster_spark)
    _two_executors(placement)
    run = Run(unique("scatter"), prefer=False)
    _run_query(cluster_spark, tmp_path / "checkpoint", 8, run, placement)
    assert all(record.planned == {} for record in run.records)
    stayed, compared = _stayed(run.records)
    print(f"without preferences: {stayed}/{compared} tasks ran on the executor holding "
          "their state")
    assert stayed < compared, "without preferences some partition should change executor"
    assert {e for record in run.records for e in record.ran.values()} == \
        set(placement.executors())


def test_partitions_of_a_lost_executor_move_to_the_survivor(cluster_spark: Any,
                                                            spark_cluster: Any,
                                                            shim_jar: Path,
                                                            tmp_path: Path) -> None:
    placement = Placement(cluster_spark)
    _two_executors(placement)
    run = Run(unique("kill"), prefer=True)
    lost: dict[str, str] = {}
    kill_after = 1

    def kill_worker_mid_run(batch_id: int) -> None:
        if batch_id != kill_after:
            return
        before = set(placement.executors())
        spark_cluster.kill_worker(0)
        wait_until(lambda: len(placement.executors()) == 1, 120,
                   "the driver to notice the killed worker's executor")
        (lost["survivor"],) = placement.executors()
        (lost["dead"],) = before - {lost["survivor"]}

    try:
        _run_query(cluster_spark, tmp_path / "checkpoint", 5, run, placement,
                   after_batch=kill_worker_mid_run)
    finally:
        spark_cluster.restart_worker(0)
        wait_until(lambda: len(placement.executors()) == 2, 180,
                   "the restarted worker's executor to join the application")

    survivor, dead = lost["survivor"], lost["dead"]
    before_kill = run.records[kill_after]
    moved = {p for p, e in before_kill.ran.items() if e == dead}
    assert moved, "the killed worker held some partitions"
    for record in run.records[kill_after + 1:]:
        assert set(record.planned.values()) == {survivor}, record
        assert set(record.ran.values()) == {survivor}, record
        assert record.learned == {run.key(p): survivor for p in range(PARTITIONS)}
    for partition in set(range(PARTITIONS)) - moved:
        assert all(r.ran[partition] == survivor for r in run.records), \
            f"partition {partition} lived on the survivor and must not have moved"
