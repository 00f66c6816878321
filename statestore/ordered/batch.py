"""One batch's result and commit, shared by both forms of the ordered stage (driver side).

``OrderedStateful.process_batch`` (inside ``foreachBatch``) and ``commit_batch`` (the stage in
the streaming plan) both end in :func:`finish_batch` once every task reported its commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orderedstream.core.commitlog import CommitRecord
from orderedstream.core.errors import OptionError, OrderViolationError
from orderedstream.sinks.commit import publish_batch
from orderedstream.sinks.deltacommit import DeltaPrepared, Offsets
from orderedstream.statestore.ordered.output import batch_output_df
from orderedstream.statestore.ordered.plan import (
    BatchPlan,
    PartitionBase,
    PartitionCommit,
    advance,
    extra_for,
)
from orderedstream.statestore.ordered.replay_spec import replay_spec
from orderedstream.statestore.ordered.retention import RetentionResult


@dataclass(frozen=True)
class BatchResult:
    """What ``process_batch`` / ``commit_batch`` did for one batch (driver side)."""

    batch_id: int
    skipped: bool
    record: CommitRecord
    commits: tuple[PartitionCommit, ...] = ()

    @property
    def records(self) -> int:
        """Input records the batch's tasks processed, over every Kafka partition."""
        return sum(c.records for c in self.commits)

    @property
    def output_rows(self) -> int:
        """Output rows the batch's commit record lists."""
        return self.record.rows

    preferred: Mapping[str, str] = field(default_factory=dict)
    """Kafka partition -> executor id its task was asked to run on ({} without placement)."""

    @property
    def executors(self) -> dict[str, str | None]:
        """Kafka partition -> executor that committed its state in this batch (Spark's executor
        id when the batch was placed, else ``<host>/<executor id>`` when known)."""
        return {c.partition_id: c.executor for c in self.commits}

    @property
    def restores(self) -> int:
        """Partitions whose committed state was restored from the object store (their task's
        executor had no current local copy) in this batch."""
        return sum(1 for c in self.commits if c.metrics.get("restored"))

    @property
    def restored(self) -> tuple[str, ...]:
        """The Kafka partitions counted by :attr:`restores`."""
        return tuple(sorted(c.partition_id for c in self.commits if c.metrics.get("restored")))

    @property
    def bytes_downloaded(self) -> int:
        """State bytes downloaded from the object store by this batch's tasks."""
        return sum(int(c.metrics.get("bytes_downloaded") or 0) for c in self.commits)

    cleanup: RetentionResult | None = None
    """The state cleanup run after this batch's commit with ``cleanup_in_background=False``
    (None when none was due or it failed; a failure is logged as a warning and never fails
    the batch). In the background (the default) it is always None: the cleanup started after
    this batch reports through ``OrderedStateful.wait_for_cleanup``."""

    processor: Any = field(default=None, repr=False, compare=False)
    """The ``OrderedStateful`` that ran the batch."""

    def output_df(self, spark: Any = None, *, engine: Literal["arrow", "spark"] = "arrow"
                  ) -> Any:
        """The rows this batch committed, as a DataFrame read from exactly the files its commit
        record lists; the same rows when the batch was a skipped replay.

        Forward them to another sink inside ``foreachBatch``; that sink must dedupe by batch
        id, since a replay returns them again (see ``orderedstream.statestore.ordered.output``).

        Parameters
        ----------
        spark
            The Spark session to read with; ``None``: the active session.
        engine
            ``"arrow"`` reads the files with pyarrow and hands Spark the table; ``"spark"``
            reads them with Spark's own reader.

        Returns
        -------
        pyspark.sql.DataFrame
            The batch's committed output rows.

        Raises
        ------
        OptionError
            The result was built without its ``OrderedStateful`` (use
            ``OrderedStateful.batch_output(batch_id)``).

        Runs on
        -------
        driver"""
        if self.processor is None:
            raise OptionError("this BatchResult was built without its OrderedStateful; use "
                              "OrderedStateful.batch_output(batch_id) instead")
        return batch_output_df(spark, self.processor.log, self.record,
                               self.processor.options.storage_options, engine)


def finish_batch(processor: Any, prepared: Any, plan: BatchPlan,
                 bases: Mapping[str, PartitionBase], commits: list[PartitionCommit], *,
                 planned: Offsets | None, placed: Any = None) -> BatchResult:
    """Commit one batch from its tasks' partition commits, in one commit of the sink.

    Refuses a Kafka partition processed twice, builds the batch's ``extra`` (the
    carried-forward state map), makes the one commit (Delta: files, state manifests and
    offsets; fenced Parquet: the commit record, then ``_spark_metadata``), records placement
    and runs the retention that is due.

    Parameters
    ----------
    processor
        The ``OrderedStateful`` running the stage.
    prepared
        What the sink's prepare step returned for this (not yet committed) batch.
    plan
        The batch's plan (``plan.batch_id`` is the batch committed).
    bases
        Kafka partition -> the state each task started from.
    commits
        The tasks' commits, one per Kafka partition processed.
    planned
        The Kafka ranges the batch covers (Delta stores them as the batch's offsets);
        ``None``: the offsets the tasks processed.
    placed
        The placement the batch was planned with, or ``None`` without placement.

    Returns
    -------
    BatchResult
        What the batch did; also kept as ``processor.last_result``.

    Raises
    ------
    OrderViolationError
        Two tasks processed the same Kafka partition (its records were split across Spark
        partitions).

    Runs on
    -------
    driver"""
    batch_id = plan.batch_id
    seen: dict[str, PartitionCommit] = {}
    for commit in commits:
        if commit.partition_id in seen:
            raise OrderViolationError(
                f"Kafka {commit.partition_id} was processed by two tasks in batch "
                f"{batch_id} ({seen[commit.partition_id].task_attempt} and "
                f"{commit.task_attempt}): its records were split across Spark partitions. "
                "Feed the stage one input partition per Kafka partition (orderedkafka "
                "without minPartitions / maxRecordsPerPartition, no repartition)")
        seen[commit.partition_id] = commit
    files = [f for c in commits for f in c.data_files()]
    extra = extra_for(advance(bases, commits), batch_id, commits,
                      processing_time_ms=plan.processing_time_ms,
                      replay=replay_spec(processor.options, processor.func))
    if isinstance(prepared, DeltaPrepared):  # ONE Delta commit: files + state + offsets
        covered = {c.partition_id: [c.first_offset, c.last_offset + 1] for c in commits
                   if c.first_offset is not None and c.last_offset is not None}
        record = processor._delta.publish(
            prepared, files, offsets=planned if planned is not None else covered, extra=extra)
    else:  # the batch's record (files + state manifests), then Spark's log
        record = publish_batch(processor.log, processor.sink, batch_id, prepared.epoch, files,
                               prepared.schema, extra=extra)
    processor.placement.committed(placed, commits)
    result = BatchResult(batch_id, False, record, tuple(commits),
                         dict(placed.planned) if placed is not None else {},
                         cleanup=processor._cleanup_if_due(batch_id), processor=processor)
    processor.last_result = result
    processor.records_total += result.records
    return result


__all__ = ["BatchResult", "finish_batch"]
