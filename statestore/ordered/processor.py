"""``OrderedStateful``: ordered, exactly-once stateful processing of Kafka partitions, used as
the ``foreachBatch`` function of a streaming query (driver side); usage: docs/ordered-stage.md.

Batch N's one commit names its output files and every Kafka partition's state manifest (the
full map, carried forward), so output and state never disagree; a replay of a committed
batch only repairs ``_spark_metadata`` (``orderedstream.sinks.commit``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, Literal

from orderedstream.core.commitlog import CommitLog, CommitRecord, Epoch
from orderedstream.core.errors import (
    OptionError,
    OrderedStreamError,
    StateNotFoundError,
    log_failure,
    raise_reason_first,
)
from orderedstream.core.sparkmode import default_parallelism, map_items
from orderedstream.core.storage import private_options
from orderedstream.core.worker_errors import reason_first_in_callback
from orderedstream.python_datasource.client_config import secrets_from_options
from orderedstream.python_datasource.ranges import is_range_columns
from orderedstream.sinks.commit import prepare_batch
from orderedstream.sinks.deltacommit import DeltaCommitter, DeltaPrepared, frame_offsets
from orderedstream.sinks.deltalog import DeltaBatchLog, DeltaOutput, check_no_other_format
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.table import FencedTable
from orderedstream.statestore.ordered.batch import BatchResult, finish_batch
from orderedstream.statestore.ordered.maintenance import StateCleanups
from orderedstream.statestore.ordered.options import OrderedOptions, to_arrow_schema
from orderedstream.statestore.ordered.output import batch_output_df
from orderedstream.statestore.ordered.placement import StatePlacement
from orderedstream.statestore.ordered.plan import (
    BatchPlan,
    PartitionBase,
    PartitionCommit,
    bases_from_extra,
    partition_id,
)
from orderedstream.statestore.ordered.precheck import (
    check_buckets,
    check_input_columns,
    check_picklable,
)
from orderedstream.statestore.ordered.retention import (
    DEFAULT_CLEANUP_INTERVAL_BATCHES,
    OrderedRetention,
    RetentionPolicy,
    RetentionResult,
    retention_window,
)
from orderedstream.statestore.ordered.runner import COMMIT_SCHEMA, OrderedTask, UserFunction
from orderedstream.statestore.ordered.state_access import read_state
from orderedstream.statestore.ordered.state_access import store_options as state_store_options
from orderedstream.statestore.ordered.timeouts import NoTimeout, Timeout

_log = logging.getLogger("orderedstream.statestore.ordered")

DEFAULT_ROW_GROUP_ROWS = 131_072


class OrderedStateful:
    """Ordered stateful processing of each Kafka partition, one ``foreachBatch`` call per batch.

    ``func(key, record, state) -> iterable of rows | None`` runs on executors, once per record
    in offset order (``record`` a dict of the input columns) and once per timed-out key
    (``record`` None, ``state.has_timed_out`` True); it must pickle (cloudpickle). Rows are
    tuples in ``output_schema`` order or dicts by field name.

    Keyword options: the table in docs/ordered-stage.md and ``OrderedOptions``. Each instance
    claims a new writer epoch on its first batch, which fences any older instance (a zombie
    driver) writing to the same output. Every method runs on the driver; the stage's tasks run
    on the executors.
    """

    def __init__(self, func: UserFunction, *, state_location: str, output: str,
                 output_schema: Any, key: str | None = "key", timeout: Timeout | None = None,
                 columns: list[str] | tuple[str, ...] | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 writer_id: str = "ordered", max_cached_keys: int = 10_000,
                 output_batch_rows: int = 8_192,
                 writer_options: Mapping[str, Any] | None = None,
                 store_options: Mapping[str, Any] | None = None,
                 checkpoint_location: str | None = None,
                 placement: Literal["auto", "off"] = "auto",
                 keep_batches: int | None = None,
                 cleanup_interval_batches: int | None = DEFAULT_CLEANUP_INTERVAL_BATCHES,
                 kafka_options: Mapping[str, str] | None = None,
                 output_format: Literal["parquet", "delta"] = "parquet",
                 max_tasks: int | None = None,
                 cleanup_in_background: bool = True,
                 ) -> None:
        if not callable(func):
            raise OptionError(f"OrderedStateful(func=...) must be callable, got {func!r}")
        check_picklable(func)  # here, not in batch 0's report (statestore.ordered.precheck)
        self.func = func
        if max_tasks is not None and (isinstance(max_tasks, bool) or not isinstance(
                max_tasks, int) or max_tasks < 0):
            raise OptionError(f"OrderedStateful(max_tasks={max_tasks!r}): None (the cluster's "
                              "default parallelism), 0 (one task per range) or a positive int")
        self.max_tasks = max_tasks
        self._kafka_secrets = secrets_from_options(kafka_options)  # values never printed
        self.options = OrderedOptions(
            state_location=state_location, output=output,
            output_schema=to_arrow_schema(output_schema), key=key,
            timeout=timeout or NoTimeout(), columns=None if columns is None else tuple(columns),
            max_cached_keys=max_cached_keys, output_batch_rows=output_batch_rows,
            storage_options=storage_options or {}, query_name=writer_id,
            writer_options=writer_options or {}, store_options=store_options or {},
            checkpoint_location=checkpoint_location, placement=placement)
        check_buckets(self.options)
        self.sink = FencedParquetOptions.from_mapping({
            "row_group_rows": DEFAULT_ROW_GROUP_ROWS, **dict(writer_options or {}),
            "path": self.options.output, "storage_options": self.options.storage_options,
            "writer_id": writer_id})
        self.placement = StatePlacement(
            checkpoint_location=self.options.checkpoint_location, mode=self.options.placement,
            key_prefix=self.options.state_location, storage_options=self.options.storage_options)
        self.retention = RetentionPolicy(
            keep_batches=(state_store_options(self.options).keep_last if keep_batches is None
                          else keep_batches),
            cleanup_interval_batches=cleanup_interval_batches, background=cleanup_in_background)
        if output_format not in ("parquet", "delta"):
            raise OptionError(f"OrderedStateful(output_format={output_format!r}): accepted are "
                              "'delta' (a Delta Lake table) and 'parquet' (fenced Parquet)")
        self.output_format = output_format
        # Delta: one Delta commit per batch under the stable writer id (app transaction).
        self._delta = (DeltaCommitter(replace(self.sink, file_stats=True), app_id=writer_id)
                       if output_format == "delta" else None)
        if self._delta is not None:
            self.sink = self._delta.options
        self._log: CommitLog | DeltaBatchLog | None = None
        self._cleanups = StateCleanups(self._new_retention, location=self.options.state_location)
        self._epoch: Epoch | None = None
        self._output_checked = False
        # This run's writer id (the epoch claimed under it at the first batch fences older runs).
        self._writer_id = f"{self.options.query_name}-{uuid.uuid4().hex[:8]}"
        self.last_result: BatchResult | None = None
        # Records this instance processed (committed batches, replays not counted): with
        # emit=ranges Spark's numInputRows counts range rows, not records.
        self.records_total = 0

    # ---- driver-side helpers -----------------------------------------------------------
    @property
    def log(self) -> Any:
        """The output table's batch log (also the state's version index): ``CommitLog``, or
        ``DeltaBatchLog`` (the same read API over the Delta log) for Delta output."""
        if self._log is None:
            self._log = self._delta.log if self._delta is not None else self._new_log()
        return self._log

    def _new_log(self, *, private: bool = False, cache: int | None = None) -> Any:
        """A batch log object of the output with caches (``private``: a filesystem) of its own,
        its cache ``cache`` versions (None: the log's default)."""
        if self._delta is not None:
            return self._delta.new_log(private=private, cache_entries=cache)
        options = self.options.storage_options
        return CommitLog(self.options.output, private_options(options) if private else options,
                         cache_records=cache)

    def table(self) -> Any:
        """The committed output: ``FencedTable`` (pyarrow dataset, ``to_arrow()``, Spark
        metadata), or ``DeltaOutput`` (``to_arrow()``, ``delta_table()``) for Delta."""
        if self._delta is not None:
            return DeltaOutput(self.options.output, self.options.storage_options)
        return FencedTable(self.options.output, log=self.log)

    def partition_states(self, batch_id: int | None = None) -> dict[str, PartitionBase]:
        """Kafka partition -> its state as committed by a batch (one commit record read).

        Parameters
        ----------
        batch_id
            The batch; ``None``: the latest committed.

        Returns
        -------
        dict[str, PartitionBase]
            Empty when the batch (or any batch) is not committed."""
        record = (self.log.latest_batch_record() if batch_id is None
                  else self.log.get(batch_id))
        return {} if record is None else bases_from_extra(record.extra)

    def read_state(self, topic: str, partition: int, batch_id: int | None = None,
                   ) -> Iterator[tuple[Any, Any]]:
        """One Kafka partition's state as a batch committed it, from a private read-only copy.

        Parameters
        ----------
        topic, partition
            The Kafka partition.
        batch_id
            The batch; ``None``: the latest committed.

        Returns
        -------
        Iterator[tuple[Any, Any]]
            ``(key, value)`` pairs (none without state); see :func:`read_state` for its errors."""
        pid = partition_id(topic, partition)
        base = self.partition_states(batch_id).get(pid)
        if base is None:
            return iter(())
        return read_state(self.options, base, pid)

    def batch_output(self, batch_id: int, spark: Any = None, *,
                     engine: Literal["arrow", "spark"] = "arrow") -> Any:
        """The rows a batch committed, as a Spark DataFrame (see ``BatchResult.output_df``).

        Parameters
        ----------
        batch_id
            The committed batch.
        spark, engine
            As in ``BatchResult.output_df``.

        Raises
        ------
        StateNotFoundError
            The batch is not committed."""
        record = self.log.get(int(batch_id))
        if record is None:
            raise StateNotFoundError(f"batch {batch_id} is not committed at "
                                     f"{self.options.output} (latest: {self.log.latest()})")
        return batch_output_df(spark, self.log, record, self.options.storage_options, engine)

    def cleanup_state(self, keep_batches: int | None = None) -> RetentionResult:
        """Delete state no longer needed now (after a running background cleanup); safe beside a
        running query. Returns what it deleted and kept (``RetentionResult``).

        Parameters
        ----------
        keep_batches
            Batch records whose state versions are kept; ``None``: the processor's."""
        return self._cleanups.run(self.retention.keep_batches if keep_batches is None
                                  else keep_batches)

    def wait_for_cleanup(self, timeout: float | None = None) -> RetentionResult | None:
        """The newest finished automatic cleanup's result once none runs (``None``: none yet, or
        it failed, logged as a warning).

        Parameters
        ----------
        timeout
            Seconds to wait at most; ``None``: no limit.

        Raises
        ------
        TimeoutError
            The cleanup still runs after ``timeout`` seconds."""
        return self._cleanups.result(timeout)

    def _new_retention(self) -> OrderedRetention:
        """Retention with a log and filesystems of its own (its thread shares no cache), whose
        cache holds the versions a cleanup reads (``retained_batch_records``)."""
        cache = retention_window(self.retention.keep_batches) + 16
        return OrderedRetention(self._new_log(private=True, cache=max(cache, 128)),
                                self.options.state_location,
                                private_options(self.options.storage_options))

    def _cleanup_if_due(self, batch_id: int) -> RetentionResult | None:
        """Automatic retention after committing ``batch_id`` (``StateCleanups.after_batch``)."""
        return self._cleanups.after_batch(self.retention, batch_id)

    # ---- the stage in the query's plan (figures in StreamingQueryProgress) ------------
    def apply(self, df: Any, *, name: str = "orderedstream") -> Any:
        """The ordered stage as part of streaming ``df``'s plan; write the result with
        ``.writeStream.foreachBatch(self.commit_batch)``. Spark then reports each batch's figures
        in ``observedMetrics[name]``; same commit and exactly-once as :meth:`process_batch`.

        Parameters
        ----------
        df
            A streaming ``orderedkafka`` DataFrame, either emit mode.
        name
            The key of the figures under ``StreamingQueryProgress.observedMetrics``.

        Raises
        ------
        OptionError
            A required column is missing, or placement would place batches on a cluster
            (use ``process_batch`` there, or ``placement="off"``)."""
        from orderedstream.statestore.ordered.inplan_driver import apply_stage

        check_input_columns(self.options, df.columns)  # before the query starts
        return apply_stage(self, df, name=name)

    @reason_first_in_callback  # the pack's sentence right after Spark's prefix
    def commit_batch(self, batch_df: Any, batch_id: int) -> BatchResult:
        """``foreachBatch`` function of a query written from :meth:`apply`: runs the batch's
        stage (one Spark job) and commits it exactly once; returns its ``BatchResult``.

        Parameters
        ----------
        batch_df
            The DataFrame Spark hands to ``foreachBatch``.
        batch_id
            Spark's batch id.

        Raises
        ------
        OrderedStreamError
            The pack's reason, logged before Spark's report (see :meth:`process_batch`)."""
        from orderedstream.statestore.ordered.inplan_driver import commit_stage

        try:
            return commit_stage(self, batch_df, batch_id)
        except OrderedStreamError as exc:  # the reason on the console before Spark's report
            log_failure(_log, exc)
            raise

    # ---- the foreachBatch function -----------------------------------------------------
    @reason_first_in_callback  # the pack's sentence right after Spark's prefix
    def process_batch(self, batch_df: Any, batch_id: int) -> BatchResult:
        """Process a micro-batch exactly once and return its ``BatchResult``; use as
        ``foreachBatch``'s function.

        Parameters
        ----------
        batch_df
            The ``orderedkafka`` DataFrame Spark hands to ``foreachBatch``.
        batch_id
            Spark's batch id.

        Raises
        ------
        OrderedStreamError
            The pack's reason (a missing column, a Kafka partition split across tasks, a
            fenced writer, ...), logged before Spark's report."""
        try:
            return self._process_batch(batch_df, int(batch_id))
        except OrderedStreamError as exc:  # the reason on the console before Spark's report
            log_failure(_log, exc)
            raise

    def check_locations(self) -> None:
        """Probe the state and output locations (an object written, read back, deleted):
        LocationError naming the URL when one cannot be written (a missing bucket, denied
        access, a regular file on the path). Call it before starting the query to fail fast
        (``orderedstream run`` does); the batches do not, since it costs the driver an S3
        client of its own."""
        self.options.check_locations()

    def check_new_output(self) -> None:
        """Once, before the first commit to an output that holds no table yet: no table of the
        other format is there (``sinks.deltalog.check_no_other_format``)."""
        if self._output_checked:
            return
        new = (not self._delta.has_table if self._delta is not None
               else self.log.latest_version() is None)
        if new:
            check_no_other_format(self.options.output, self.options.storage_options,
                                  writing=self.output_format,
                                  who=f"OrderedStateful(output_format={self.output_format!r})")
        self._output_checked = True

    def _process_batch(self, batch_df: Any, batch_id: int) -> BatchResult:
        ranges = is_range_columns(batch_df.columns)  # orderedkafka emit=ranges: tasks read
        planned = frame_offsets(batch_df) if self._delta is not None and ranges else None
        if self._delta is not None:  # replay only with equal offsets; schema (sinks.deltacommit)
            prepared: Any = self._delta.prepare(
                batch_id, self.options.output_schema,
                lambda: planned if planned is not None else frame_offsets(batch_df))
        else:  # the sinks' publish path: skip a replay (repairing _spark_metadata), check the
            # epoch (claimed at this instance's first batch) and the schema against the table.
            prepared = prepare_batch(
                self.log, self.sink, batch_id, self.options.output_schema, epoch=self._epoch,
                writer_id=self._writer_id, owner=None)
        if isinstance(prepared, CommitRecord):
            self.last_result = BatchResult(batch_id, True, prepared, processor=self)
            return self.last_result
        if not isinstance(prepared, DeltaPrepared):
            self._epoch = prepared.epoch
        self.check_new_output()
        check_input_columns(self.options, batch_df.columns)
        bases = self.partition_states()  # of the latest batch, older than this one
        now_ms = int(time.time() * 1000)
        plan = BatchPlan(batch_id=batch_id, processing_time_ms=now_ms, bases=bases)
        task = OrderedTask(self.options, self.func, plan, self.sink,
                           kafka_secrets=self._kafka_secrets)
        frame = batch_df
        if self.options.columns is not None and not ranges:
            frame = batch_df.select(*self.options.required_columns())
        frame, placed = self.placement.prefer(frame, batch_id)
        if ranges and placed is None and self.max_tasks != 0:
            frame = frame.coalesce(self.max_tasks or default_parallelism(
                frame.sparkSession))  # ranges share tasks, in turn
        try:
            rows = frame.mapInArrow(task, _commit_ddl()).collect()
            commits = [PartitionCommit.from_json(row["commit"]) for row in rows]
            commits += self._run_due_timeouts(batch_df.sparkSession, task, bases,
                                              {c.partition_id for c in commits}, plan)
        except Exception as exc:  # the pack's reason first, Spark's trace as its cause
            raise_reason_first(exc, f"in batch {batch_id}'s ordered stage")
        return finish_batch(self, prepared, plan, bases, commits, planned=planned,
                            placed=placed)

    foreach_batch = process_batch

    def _run_due_timeouts(self, spark: Any, task: OrderedTask,
                          bases: Mapping[str, PartitionBase], processed: set[str],
                          plan: BatchPlan) -> list[PartitionCommit]:
        """Processing-time timeouts of Kafka partitions that got no records in this batch.

        (Event-time watermarks advance only with a partition's own records, so an idle
        partition has nothing new to time out.)
        """
        if self.options.timeout.kind != "processing":
            return []
        due = sorted(pid for pid, base in bases.items()
                     if pid not in processed and base.next_timeout_ms is not None
                     and base.next_timeout_ms < plan.processing_time_ms)
        if not due:
            return []
        texts = map_items(spark, due, lambda pid: task.run_timeouts_only(pid).to_json())
        return [PartitionCommit.from_json(text) for text in texts]


def _commit_ddl() -> str:
    return ", ".join(f"{f.name} string" for f in COMMIT_SCHEMA)

