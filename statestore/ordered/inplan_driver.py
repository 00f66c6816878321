"""Driver side of the in-plan ordered stage: ``OrderedStateful.apply`` / ``commit_batch``.

How the stage sits in the query's plan, and why the plan travels as a local property:
``orderedstream.statestore.ordered.inplan``. The commit is ``process_batch``'s, step by step:
prepare (a committed batch is skipped, or refused when a Delta replay's planned Kafka ranges
differ), the stage (``collect()`` of the DataFrame Spark hands to ``foreachBatch``), due
timeouts of idle partitions, then ``batch.finish_batch`` (one commit per batch).
"""

from __future__ import annotations

import time
from typing import Any

from orderedstream.core.commitlog import CommitRecord
from orderedstream.core.errors import OptionError, OrderViolationError, raise_reason_first
from orderedstream.core.sparkmode import default_parallelism, is_connect
from orderedstream.python_datasource.ranges import is_range_columns
from orderedstream.sinks.commit import prepare_batch
from orderedstream.sinks.deltacommit import DeltaPrepared, Offsets
from orderedstream.statestore.ordered.batch import BatchResult, finish_batch
from orderedstream.statestore.ordered.inplan import (
    OBSERVED_NAME,
    PLAN_PROPERTY,
    STAGE_SCHEMA,
    StageTask,
    encode_plan,
    observed_columns,
    plan_tag,
    stage_ddl,
)
from orderedstream.statestore.ordered.plan import BatchPlan, PartitionCommit
from orderedstream.statestore.ordered.runner import OrderedTask


def apply_stage(processor: Any, df: Any, *, name: str = OBSERVED_NAME) -> Any:
    """The ordered stage in ``df``'s plan: its rows, observed as ``name``.

    With ``emit=ranges`` the ranges are coalesced to ``max_tasks`` tasks (0: as Spark gave
    them); record rows are checked and narrowed to the required columns.

    Parameters
    ----------
    processor
        The ``OrderedStateful`` (see ``OrderedStateful.apply``).
    df
        A streaming ``orderedkafka`` DataFrame, either emit mode.
    name
        The key of the stage's figures under ``StreamingQueryProgress.observedMetrics``.

    Returns
    -------
    pyspark.sql.DataFrame
        The stage's rows (:data:`STAGE_SCHEMA`), for ``foreachBatch(stage.commit_batch)``.

    Raises
    ------
    OptionError
        ``df`` is not streaming; ``name`` is empty; placement would place the batches'
        tasks; the input lacks a required column.

    Runs on
    -------
    driver"""
    if not getattr(df, "isStreaming", False):
        raise OptionError("OrderedStateful.apply(df) takes a streaming DataFrame (spark."
                          "readStream.format('orderedkafka')...load()); for a batch DataFrame "
                          "call process_batch(df, batch_id)")
    if not isinstance(name, str) or not name:
        raise OptionError(f"OrderedStateful.apply(name={name!r}): a non-empty string (the "
                          "key under StreamingQueryProgress.observedMetrics)")
    if processor.placement.places(df.sparkSession):
        raise OptionError(
            "OrderedStateful.apply(): placement='auto' with a checkpoint_location places each "
            "batch's tasks on a cluster, which a plan fixed at start() cannot do. Use "
            "foreachBatch(stage.process_batch) to keep placement, or placement='off'")
    options = processor.options
    if is_range_columns(df.columns):
        if processor.max_tasks != 0:  # ranges share tasks, in turn (see max_tasks)
            df = df.coalesce(processor.max_tasks or default_parallelism(df.sparkSession))
    else:
        options.check_input(list(df.columns))
        if options.columns is not None:
            df = df.select(*options.required_columns())
    task = StageTask(options, processor.func, processor.sink, stage_id=processor._writer_id,
                     kafka_secrets=processor._kafka_secrets)
    return df.mapInArrow(task, stage_ddl()).observe(name, *observed_columns())


def _run_stage(processor: Any, batch_df: Any, plan: BatchPlan, *, dry_run: bool) -> list[Any]:
    """``collect()`` of the stage for ``plan`` (its tasks read it from a local property set on
    this thread for the action only; under Spark Connect, from a job tag the session adds for
    the action only: ``docs/decisions/0021-connect-plan-transport.md``)."""
    spark = batch_df.sparkSession
    encoded = encode_plan(plan, dry_run=dry_run)
    if is_connect(spark):
        tag = plan_tag(processor._writer_id, encoded)
        spark.addTag(tag)
        try:
            return list(batch_df.collect())
        except Exception as exc:  # the pack's reason first, Spark's trace as its cause
            raise_reason_first(exc, f"in batch {plan.batch_id}'s ordered stage")
        finally:
            spark.removeTag(tag)
    context = spark.sparkContext
    key = PLAN_PROPERTY + processor._writer_id
    context.setLocalProperty(key, encoded)
    try:
        return list(batch_df.collect())
    except Exception as exc:  # the pack's reason first, Spark's trace as its cause
        raise_reason_first(exc, f"in batch {plan.batch_id}'s ordered stage")
    finally:
        context.setLocalProperty(key, None)


def _planned(rows: list[Any]) -> Offsets:
    return {str(r["partition"]): [int(r["planned_from"]), int(r["planned_until"])]
            for r in rows if r["planned_from"] is not None}


def commit_stage(processor: Any, batch_df: Any, batch_id: int) -> BatchResult:
    """Commit one batch of a query written from ``apply``, as ``process_batch`` would.

    Prepare (a committed batch is skipped, or refused when a Delta replay's planned Kafka
    ranges differ), run the stage (``collect()`` with the batch's plan), the due timeouts of
    idle partitions, then :func:`finish_batch`.

    Parameters
    ----------
    processor
        The ``OrderedStateful`` (see ``OrderedStateful.commit_batch``).
    batch_df
        The DataFrame Spark hands to ``foreachBatch``: the rows of ``apply(df)``.
    batch_id
        Spark's batch id.

    Returns
    -------
    BatchResult
        What the batch did (``skipped`` for a committed batch's replay).

    Raises
    ------
    OptionError
        ``batch_df`` is not the stage's rows.
    OrderViolationError
        The tasks ran another batch's plan (``commit_batch`` is not the query's
        ``foreachBatch`` function), or a Kafka partition was split across tasks.
    CommitConflictError
        A replayed Delta batch's planned ranges differ from the committed ones.

    Runs on
    -------
    driver"""
    batch_id = int(batch_id)
    if not set(STAGE_SCHEMA.names) <= set(batch_df.columns):
        raise OptionError(
            f"OrderedStateful.commit_batch got a DataFrame with columns {batch_df.columns}: "
            "it commits the rows of OrderedStateful.apply(df) (write that DataFrame with "
            ".writeStream.foreachBatch(stage.commit_batch)); for the source's own rows use "
            "foreachBatch(stage.process_batch)")
    options = processor.options
    delta = processor._delta
    if delta is not None:  # a replay is skipped only with the committed Kafka ranges
        dry = BatchPlan(batch_id=batch_id, processing_time_ms=int(time.time() * 1000))
        prepared: Any = delta.prepare(
            batch_id, options.output_schema,
            lambda: _planned(_run_stage(processor, batch_df, dry, dry_run=True)))
    else:  # skip a replay (repairing _spark_metadata), check the epoch and the schema
        prepared = prepare_batch(
            processor.log, processor.sink, batch_id, options.output_schema,
            epoch=processor._epoch, writer_id=processor._writer_id, owner=None)
    if isinstance(prepared, CommitRecord):
        processor.last_result = BatchResult(batch_id, True, prepared, processor=processor)
        return processor.last_result
    if not isinstance(prepared, DeltaPrepared):
        processor._epoch = prepared.epoch
    processor.check_new_output()
    bases = processor.partition_states()  # of the latest batch, older than this one
    plan = BatchPlan(batch_id=batch_id, processing_time_ms=int(time.time() * 1000),
                     bases=bases)
    rows = _run_stage(processor, batch_df, plan, dry_run=False)
    commits = [PartitionCommit.from_json(r["commit"]) for r in rows if r["commit"] is not None]
    stray = sorted({c.batch_id for c in commits} - {batch_id})
    if stray:  # tasks that ran another batch's plan (Connect sets no batch id on tasks)
        raise OrderViolationError(
            f"batch {batch_id}'s ordered stage returned commits of batch(es) {stray}: "
            "commit_batch must be the query's foreachBatch function; nothing was committed")
    task = OrderedTask(options, processor.func, plan, processor.sink,
                       kafka_secrets=processor._kafka_secrets)
    try:
        commits += processor._run_due_timeouts(batch_df.sparkSession, task, bases,
                                               {c.partition_id for c in commits}, plan)
    except Exception as exc:
        raise_reason_first(exc, f"in batch {batch_id}'s ordered stage (timeouts)")
    return finish_batch(processor, prepared, plan, bases, commits,
                        planned=_planned(rows) if delta is not None else None)


__all__ = ["apply_stage", "commit_stage"]
