"""The ordered stage inside the streaming query's plan, so its figures reach Spark's progress.

``stage.apply(df)`` puts the stage into the plan (input, ``coalesce`` to ``max_tasks`` with
``emit=ranges``, ``mapInArrow(StageTask)``, ``observe("orderedstream", ...)``) and
``.writeStream.foreachBatch(stage.commit_batch)`` commits each batch as ``process_batch``
does; :data:`OBSERVED` lands in ``lastProgress["observedMetrics"]["orderedstream"]``.
``placement="auto"`` cannot be planned per batch here: with it active use ``process_batch``.
"""

from __future__ import annotations

import base64
import itertools
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from orderedstream.core.errors import OptionError, OrderViolationError
from orderedstream.core.pandaslazy import keep_pandas_lazy
from orderedstream.python_datasource.client_config import KafkaSecrets
from orderedstream.python_datasource.ranges import is_range_columns
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.statestore.ordered.inflight import (
    in_order,
    light_range,
    partitions_in_flight,
)
from orderedstream.statestore.ordered.options import OrderedOptions
from orderedstream.statestore.ordered.plan import (
    BatchPlan,
    PartitionBase,
    PartitionCommit,
)
from orderedstream.statestore.ordered.runner import OrderedTask, UserFunction, _Runs

# A plan is fixed when the query starts, but each batch's tasks need that batch's id, clock
# and state bases: ``commit_batch`` sets them as a Spark local property (PLAN_PROPERTY + the
# stage's id) on its thread just for its action (``collect()``, the action whose observed
# metrics Spark reports), and the tasks read it with ``TaskContext.getLocalProperty``. Spark
# Connect cannot set local properties: there the plan rides in a job tag (PLAN_TAG), see
# docs/decisions/0021-connect-plan-transport.md. The stage's rows carry each Kafka range's
# planned ``[from, until)``, so a Delta commit's offsets need no extra Spark job; a replay of
# a committed Delta batch runs the stage as a dry run (planned ranges only, no Kafka read, no
# state) to decide between a skip and ``CommitConflictError``. Processing-time timeouts of
# partitions with no records run in a separate small job after the stage: counted in
# ``BatchResult``, not in the observed figures.
OBSERVED_NAME = "orderedstream"
PLAN_PROPERTY = "orderedstream.ordered.plan."
"""Prefix of the local property carrying one batch's plan to the stage's tasks."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Set by Spark's MicroBatchExecution on the jobs of a micro-batch."""
PLAN_TAG = "orderedstream-plan-"
"""Under Spark Connect: prefix of the job tag (``spark.addTag``) carrying one batch's plan,
``PLAN_TAG + stage id + "-" + encode_plan(...)`` (base64 has no comma, which tags may not hold);
the tasks find it in the :data:`JOB_TAGS_PROPERTY` local property."""
JOB_TAGS_PROPERTY = "spark.job.tags"
"""The comma-separated job tags of a task's job (Connect names a session's tag
``..._Tag_<user tag>``)."""


def plan_tag(stage_id: str, encoded: str) -> str:
    """The job tag carrying an encoded plan to one stage's tasks under Spark Connect.

    Parameters
    ----------
    stage_id
        The ordered stage's id.
    encoded
        The plan as :func:`encode_plan` wrote it (base64: no comma, no ``-``).

    Returns
    -------
    str
        ``PLAN_TAG + stage_id + "-" + encoded``, for ``spark.addTag``.

    Runs on
    -------
    driver"""
    return f"{PLAN_TAG}{stage_id}-{encoded}"


def plan_from_tags(tags: str | None, stage_id: str) -> str | None:
    """The encoded plan of one stage in a task's job tags.

    Parameters
    ----------
    tags
        The task's :data:`JOB_TAGS_PROPERTY` local property (comma-separated), or ``None``.
    stage_id
        The ordered stage's id; a tag of a stage whose id extends it is not matched.

    Returns
    -------
    str | None
        The encoded plan (for :func:`decode_plan`), or ``None`` when no tag carries one.

    Raises
    ------
    OrderViolationError
        The job carries two different plans of the stage (concurrent ``commit_batch``).

    Runs on
    -------
    executor"""
    marker = f"{PLAN_TAG}{stage_id}-"
    # the rest is base64 (no "-"): a stage whose id extends this one's is another stage
    found = {rest for rest in (tag[tag.index(marker) + len(marker):]
                               for tag in (tags or "").split(",") if marker in tag)
             if rest and "-" not in rest}
    if len(found) > 1:
        raise OrderViolationError(
            f"the ordered stage {stage_id}'s job carries {len(found)} batch plans in its tags: "
            "one commit_batch at a time per stage (no concurrent actions on its session)")
    return found.pop() if found else None

STAGE_SCHEMA = pa.schema([
    ("partition", pa.string()), ("commit", pa.string()),
    ("planned_from", pa.int64()), ("planned_until", pa.int64()),
    ("records", pa.int64()), ("output_rows", pa.int64()), ("output_files", pa.int64()),
    ("state_keys", pa.int64()), ("state_bytes", pa.int64()), ("restores", pa.int64()),
    ("bytes_downloaded", pa.int64()), ("timeouts", pa.int64()),
    ("state_commit_ms", pa.float64())])
"""One row per Kafka partition of the batch: its ``PartitionCommit`` JSON (null when the
range was empty or in a dry run), its planned range and its figures; plus, from the stage's
first task, one row with no partition carrying the state totals before the batch."""

_SUMMED = ("records", "output_rows", "output_files", "state_keys", "state_bytes", "restores",
           "bytes_downloaded", "timeouts")
OBSERVED: tuple[str, ...] = (*_SUMMED, "state_commit_ms", "kafka_partitions")
"""The figures under ``observedMetrics["orderedstream"]``: sums over the batch's Kafka
partitions (``records``, ``output_rows``, ``output_files``, ``restores``,
``bytes_downloaded``, ``timeouts``); ``state_keys`` / ``state_bytes`` the totals over every
Kafka partition's state after the batch; ``state_commit_ms`` the slowest task's state commit;
``kafka_partitions`` the partitions (ranges) the batch covered."""


def stage_ddl() -> str:
    """The stage's output schema (:data:`STAGE_SCHEMA`) as a Spark DDL string.

    Returns
    -------
    str
        ``"partition string, commit string, ..."``, for ``mapInArrow``.

    Runs on
    -------
    driver"""
    names = {pa.string(): "string", pa.int64(): "bigint", pa.float64(): "double"}
    return ", ".join(f"{f.name} {names[f.type]}" for f in STAGE_SCHEMA)


def encode_plan(plan: BatchPlan, *, dry_run: bool) -> str:
    """A batch's plan as a local property or job tag value (zlib + base64 JSON).

    Parameters
    ----------
    plan
        The batch's id, processing time and state bases.
    dry_run
        Whether the tasks only report their planned ranges (a replay of a committed batch).

    Returns
    -------
    str
        ASCII text that :func:`decode_plan` reads back.

    Runs on
    -------
    driver"""
    data = {"batch_id": plan.batch_id, "processing_time_ms": plan.processing_time_ms,
            "bases": {pid: b.to_dict() for pid, b in plan.bases.items()}, "dry_run": dry_run}
    raw = zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 6)
    return base64.b64encode(raw).decode("ascii")


def decode_plan(text: str) -> tuple[BatchPlan, bool]:
    """Read a plan written by :func:`encode_plan`.

    Parameters
    ----------
    text
        The local property's or job tag's value.

    Returns
    -------
    tuple[BatchPlan, bool]
        The plan and whether it is a dry run.

    Runs on
    -------
    executor"""
    data = json.loads(zlib.decompress(base64.b64decode(text)))
    bases = {pid: PartitionBase.from_dict(b) for pid, b in data["bases"].items()}
    return (BatchPlan(batch_id=int(data["batch_id"]),
                      processing_time_ms=int(data["processing_time_ms"]), bases=bases),
            bool(data["dry_run"]))


def _row(pid: str | None, planned: tuple[int, int] | None, commit: PartitionCommit | None,
         base: PartitionBase | None = None, **figures: Any) -> pa.RecordBatch:
    """One stage row. ``state_keys`` / ``state_bytes`` of a partition's row are its change
    against ``base`` (the carried row adds every partition's state before the batch), so the
    observed sums are the totals over every Kafka partition's state after the batch."""
    row: dict[str, Any] = {"partition": pid, "commit": None,
                           "planned_from": None if planned is None else planned[0],
                           "planned_until": None if planned is None else planned[1],
                           **{name: 0 for name in _SUMMED}, "state_commit_ms": 0.0, **figures}
    if commit is not None:
        metrics = commit.metrics
        before = base or PartitionBase()
        row.update(
            commit=commit.to_json(), records=commit.records, output_rows=commit.output_rows,
            output_files=len(commit.files),
            state_keys=int(commit.num_keys or 0) - int(before.num_keys or 0),
            state_bytes=int(commit.state_bytes() or 0) - int(before.state_bytes or 0),
            restores=int(bool(metrics.get("restored"))),
            bytes_downloaded=int(metrics.get("bytes_downloaded") or 0),
            timeouts=commit.timeouts,
            state_commit_ms=float(metrics.get("commit_s") or 0.0) * 1000)
    return pa.RecordBatch.from_pylist([row], schema=STAGE_SCHEMA)


def _carried(plan: BatchPlan) -> pa.RecordBatch:
    """The row (of the stage's first task) adding every partition's state before the batch."""
    bases = plan.bases.values()
    return _row(None, None, None, state_keys=sum(int(b.num_keys or 0) for b in bases),
                state_bytes=sum(int(b.state_bytes or 0) for b in bases))


class StageTask:
    """The ``mapInArrow`` function of the in-plan stage (executor side): the same work as
    ``OrderedTask`` per Kafka partition, for the plan its batch's local property names."""

    def __init__(self, options: OrderedOptions, func: UserFunction, sink: FencedParquetOptions,
                 *, stage_id: str, kafka_secrets: KafkaSecrets | None = None) -> None:
        self.options = options
        self.func = func
        self.sink = sink
        self.stage_id = stage_id
        self.kafka_secrets = kafka_secrets if kafka_secrets is not None else KafkaSecrets()

    def _plan(self) -> tuple[BatchPlan, bool]:
        from pyspark import TaskContext

        context = TaskContext.get()
        text = None if context is None else context.getLocalProperty(PLAN_PROPERTY + self.stage_id)
        if not text and context is not None:  # Spark Connect: the plan rides in a job tag
            text = plan_from_tags(context.getLocalProperty(JOB_TAGS_PROPERTY), self.stage_id)
        if not text:
            raise OptionError(
                "this DataFrame is the ordered stage of OrderedStateful.apply(); it runs only "
                "inside its query's foreachBatch(stage.commit_batch), which gives each batch "
                "its plan as a Spark local property or, under Spark Connect, a job tag (write "
                "it with .writeStream.foreachBatch(stage.commit_batch); keep PySpark's pinned "
                "threads, PYSPARK_PIN_THREAD=true)")
        plan, dry_run = decode_plan(text)
        spark_batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if spark_batch is not None and int(spark_batch) != plan.batch_id:
            raise OrderViolationError(
                f"the ordered stage was given the plan of batch {plan.batch_id} in Spark's "
                f"batch {spark_batch}: commit_batch must be the query's foreachBatch function")
        return plan, dry_run

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        keep_pandas_lazy()  # its Arrow rows need no pandas (core.pandaslazy)
        plan, dry_run = self._plan()
        context = TaskContext.get()
        if not dry_run and context is not None and context.partitionId() == 0:
            yield _carried(plan)
        batches = iter(batches)
        first = next(batches, None)
        if first is None:
            return
        batches = itertools.chain([first], batches)
        task = OrderedTask(self.options, self.func, plan, self.sink,
                           kafka_secrets=self.kafka_secrets)
        if is_range_columns(first.schema.names):
            yield from self._ranges(task, batches, dry_run)
        else:
            yield from self._records(task, batches, dry_run)

    def _ranges(self, task: OrderedTask, batches: Iterator[pa.RecordBatch], dry_run: bool,
                ) -> Iterator[pa.RecordBatch]:
        def run(item: tuple[str, Any, Any]) -> pa.RecordBatch:
            pid, rng, reader_options = item
            planned = (int(rng.start), int(rng.end))
            if dry_run:
                return _row(pid, planned, None)
            slices = task.range_slices(rng, reader_options)
            if slices is None:  # nothing to read: no commit, the range is still planned
                task.head_read_s.pop(pid, None)
                return _row(pid, planned, None)
            return _row(pid, planned, task.run_partition(pid, slices), task.plan.base(pid))

        # two ranges in flight (statestore.ordered.inflight); a dry run only describes them
        depth = 1 if dry_run else partitions_in_flight()
        yield from in_order(run, task.ranges(batches), depth=depth,
                            light=lambda item: light_range(item[1]))

    def _records(self, task: OrderedTask, batches: Iterator[pa.RecordBatch], dry_run: bool,
                 ) -> Iterator[pa.RecordBatch]:
        runs = _Runs(batches)
        done: set[str] = set()
        while (pid := runs.peek()) is not None:
            if pid in done:
                raise OrderViolationError(
                    f"Kafka {pid} appears twice in one task of batch {task.plan.batch_id}: "
                    "its rows are not contiguous (the input was shuffled or unioned)")
            done.add(pid)
            if dry_run:
                low: int | None = None
                high = -1
                for piece in runs.take(pid):
                    lo, hi = (v.as_py() for v in pc.min_max(piece.column("offset")).values())
                    low = lo if low is None else min(low, lo)
                    high = max(high, hi)
                yield _row(pid, None if low is None else (low, high + 1), None)
                continue
            commit = task.run_partition(pid, runs.take(pid))
            planned = (None if commit.first_offset is None or commit.last_offset is None
                       else (commit.first_offset, commit.last_offset + 1))
            yield _row(pid, planned, commit, task.plan.base(pid))


def observed_columns() -> list[Any]:
    """The ``observe`` aggregates of :data:`OBSERVED` over the stage's rows."""
    from pyspark.sql import functions as F  # noqa: N812

    # One SQL expression per figure: far fewer py4j round trips than building them from
    # column functions, which showed in the main job's start. SQL, not F.lit, also keeps
    # pandas out of the driver (F.lit imports pyspark.testing.utils; see
    # docs/decisions/0014-no-pandas-import.md).
    sums = [F.expr(f"CAST(coalesce(sum(`{name}`), 0) AS BIGINT) AS `{name}`")
            for name in _SUMMED]
    return [*sums, F.expr("coalesce(max(`state_commit_ms`), 0.0D) AS `state_commit_ms`"),
            F.expr("CAST(count(`partition`) AS BIGINT) AS `kafka_partitions`")]
