"""``OrderedStateful``: ordered, exactly-once stateful processing of Kafka partitions, used as
the ``foreachBatch`` function of a streaming query (driver side).

Usage::

    def sessions(key, record, state):          # called per record, in offset order
        if state.has_timed_out:                # a timeout call: record is None
            state.remove()
            return [(key, "closed")]
        count = state.get_option(0) + 1
        state.update(count)
        state.set_timeout_duration("1 hour")
        return [(key, f"seen {count}")]

    processor = OrderedStateful(
        sessions, state_location="s3://lake/state/q1", output="s3://lake/tables/q1",
        output_schema="key binary, status string", timeout=ProcessingTimeTimeout(),
        storage_options={...})
    (spark.readStream.format("orderedkafka").option("subscribe", "t")
        .option("emit", "ranges")              # recommended: the tasks read Kafka themselves
        .load()
        .writeStream.foreachBatch(processor.process_batch)
        .option("checkpointLocation", ...).start())

or with the stage in the query's plan, so Spark's progress carries its figures
(``observedMetrics["orderedstream"]``; ``orderedstream.statestore.ordered.inplan``)::

    processor.apply(source_df).writeStream.foreachBatch(processor.commit_batch)...start()

Per batch N, through the sinks' publish path (``orderedstream.sinks.commit``): if N's commit
record exists (a replay after a crash), only ``_spark_metadata`` is repaired. Otherwise one
narrow ``mapInArrow`` stage runs every Kafka partition's records through the function on
the executors (no shuffle), writing output files and a state candidate per partition; then
the driver creates N's commit record exclusively: the output files plus, for every Kafka
partition, the manifest that is its state version (the full map, carried forward, so a
partition idle for many batches still loads with one read), and derives ``_spark_metadata``
from it. Output and state can never disagree: both come from the attempt the record names.
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
    CorruptStateError,
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
from orderedstream.statestore.ordered.keyed_state import STATE_SPACE, decode_key
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
    split_partition_id,
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
)
from orderedstream.statestore.ordered.runner import COMMIT_SCHEMA, OrderedTask, UserFunction
from orderedstream.statestore.ordered.state_access import open_store
from orderedstream.statestore.ordered.state_access import store_options as state_store_options
from orderedstream.statestore.ordered.timeouts import NoTimeout, Timeout

_log = logging.getLogger("orderedstream.statestore.ordered")

DEFAULT_ROW_GROUP_ROWS = 131_072


class OrderedStateful:
    """Ordered stateful processing of each Kafka partition, one ``foreachBatch`` call per batch.

    ``func(key, record, state) -> iterable of rows | None`` runs on executors, once per record
    in offset order (``record`` a dict of the input columns) and once per timed-out key
    (``record`` None, ``state.has_timed_out`` True). It must be picklable (cloudpickle).
    Rows are tuples in ``output_schema`` order or dicts by field name.

    Keyword options: see ``OrderedOptions``; ``output_schema`` also takes a Spark StructType or
    DDL string; ``writer_options`` are ``fencedparquet`` options (``partitionBy``,
    ``compression``, ``targetFileSize``, ...). ``writer_id`` names this query in the commit
    records; every ``OrderedStateful`` instance claims a new writer epoch on its first batch,
    which fences any older instance (a zombie driver) writing to the same output.

    Feed it ``orderedkafka`` with ``emit="ranges"`` (recommended, what the main job does):
    the tasks read their Kafka ranges themselves, records never cross the JVM. With
    ``emit="records"`` (the source's default) it takes the records DataFrame instead.
    ``kafka_options``: the secret ``kafka.*`` options (e.g. ``kafka.sasl.jaas.config``) of an
    ``orderedkafka`` source read with ``emit="ranges"``; its rows carry only their names, the
    tasks take the values from here (shipped inside the task function, never in rows).

    ``max_tasks`` (``emit="ranges"`` without placement): the batch's ranges run in at most this
    many tasks, one range after the other inside a task (default: Spark's default
    parallelism, i.e. the cores; 0: one task per range). A task's fixed cost (scheduling, the
    Python worker round trip) then comes once per core, not once per Kafka partition, which
    is what dominates small batches over many partitions.

    ``checkpoint_location`` (the query's ``checkpointLocation``) with ``placement="auto"`` makes
    each Kafka partition's task prefer the executor that committed its state last, so its local
    state copy is reused instead of restored (needs the JVM shim and a cluster; see
    ``orderedstream.statestore.ordered.placement``). ``BatchResult.restores`` /
    ``bytes_downloaded`` count what each batch restored from the object store either way.

    ``output_format="delta"`` writes a Delta Lake table instead of fenced Parquet: batch N is
    ONE Delta commit with the files, every partition's state manifest and the Kafka offsets,
    under the application transaction ``(writer_id, N)`` (``orderedstream.sinks.deltacommit``);
    ``writer_id`` must then be the query's stable name. ``log`` reads either format.

    State retention follows the commit log: ``keep_batches`` (default: the store option
    ``keep_last``, 100, like Spark's ``spark.sql.streaming.minBatchesToRetain``) is how many
    of the latest batch records keep their state versions; after every
    ``cleanup_interval_batches``-th batch (default 10; None: never automatically) the driver
    deletes older manifests/SSTs and orphans of failed attempts (``cleanup_state``,
    ``orderedstream.statestore.ordered.retention``), in a thread beside the next batches
    (``cleanup_in_background=False``: inside the due batch; ``wait_for_cleanup``).
    ``BatchResult.output_df()`` / ``batch_output`` give the rows a batch committed as a
    DataFrame, to forward to another sink.
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

    def _new_log(self, *, private: bool = False) -> Any:
        """A batch log object of the output with caches (``private``: a filesystem) of its own."""
        if self._delta is not None:
            return self._delta.new_log(private=private)
        options = self.options.storage_options
        return CommitLog(self.options.output, private_options(options) if private else options)

    def table(self) -> Any:
        """The committed output: ``FencedTable`` (pyarrow dataset, ``to_arrow()``, Spark
        metadata), or ``DeltaOutput`` (``to_arrow()``, ``delta_table()``) for Delta."""
        if self._delta is not None:
            return DeltaOutput(self.options.output, self.options.storage_options)
        return FencedTable(self.options.output, log=self.log)

    def partition_states(self, batch_id: int | None = None) -> dict[str, PartitionBase]:
        """Kafka partition -> its state as committed by batch ``batch_id`` (default latest)."""
        record = (self.log.latest_batch_record() if batch_id is None
                  else self.log.get(batch_id))
        return {} if record is None else bases_from_extra(record.extra)

    def read_state(self, topic: str, partition: int, batch_id: int | None = None,
                   ) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` pairs of one Kafka partition's state as committed by ``batch_id``
        (default: the latest batch), streamed from a private read-only copy."""
        pid = partition_id(topic, partition)
        base = self.partition_states(batch_id).get(pid)
        if base is None:
            return iter(())
        return read_state(self.options, base, pid)

    def batch_output(self, batch_id: int, spark: Any = None, *,
                     engine: Literal["arrow", "spark"] = "arrow") -> Any:
        """The rows batch ``batch_id`` committed, as a Spark DataFrame (see
        ``BatchResult.output_df``). Raises StateNotFoundError when it is not committed."""
        record = self.log.get(int(batch_id))
        if record is None:
            raise StateNotFoundError(f"batch {batch_id} is not committed at "
                                     f"{self.options.output} (latest: {self.log.latest()})")
        return batch_output_df(spark, self.log, record, self.options.storage_options, engine)

    def cleanup_state(self, keep_batches: int | None = None) -> RetentionResult:
        """Delete state no longer needed: keep the versions named by the last
        ``keep_batches`` batch records (default: the processor's), delete older manifests and
        SST files and orphans of failed attempts up to the latest committed batch. Safe beside
        a running query (see ``orderedstream.statestore.ordered.retention``); waits for a
        background cleanup that is running. Returns what it did."""
        return self._cleanups.run(self.retention.keep_batches if keep_batches is None
                                  else keep_batches)

    def wait_for_cleanup(self, timeout: float | None = None) -> RetentionResult | None:
        """Wait up to ``timeout`` seconds (None: no limit) for the automatic cleanup running
        in the background; the newest finished cleanup's result (None: none yet, or the
        newest failed, logged as a warning). TimeoutError when it still runs."""
        return self._cleanups.result(timeout)

    def _new_retention(self) -> OrderedRetention:
        """Retention with a log and filesystems of its own (its thread shares no cache)."""
        return OrderedRetention(self._new_log(private=True), self.options.state_location,
                                private_options(self.options.storage_options))

    def _cleanup_if_due(self, batch_id: int) -> RetentionResult | None:
        """Automatic retention after committing ``batch_id`` (``StateCleanups.after_batch``)."""
        return self._cleanups.after_batch(self.retention, batch_id)

    # ---- the stage in the query's plan (figures in StreamingQueryProgress) ------------
    def apply(self, df: Any, *, name: str = "orderedstream") -> Any:
        """The ordered stage as part of streaming ``df``'s plan (``orderedkafka`` rows, either
        emit mode): write the result with ``.writeStream.foreachBatch(self.commit_batch)``.

        Spark then reports each batch's stage figures (records, output rows and files, state
        keys and bytes of the partitions processed, restores, slowest state commit ms, ...)
        in ``StreamingQueryProgress.observedMetrics[name]`` and in listener events, which a
        foreachBatch stage cannot (``orderedstream.statestore.ordered.inplan``). Same commit,
        fencing and exactly-once as :meth:`process_batch`; OptionError when placement would
        place batches on a cluster (use ``process_batch`` there, or ``placement="off"``).
        """
        from orderedstream.statestore.ordered.inplan_driver import apply_stage

        check_input_columns(self.options, df.columns)  # before the query starts
        return apply_stage(self, df, name=name)

    @reason_first_in_callback  # the pack's sentence right after Spark's prefix
    def commit_batch(self, batch_df: Any, batch_id: int) -> BatchResult:
        """``foreachBatch`` function of a query written from :meth:`apply`: runs batch
        ``batch_id``'s stage (one Spark job) and commits it exactly once."""
        from orderedstream.statestore.ordered.inplan_driver import commit_stage

        try:
            return commit_stage(self, batch_df, batch_id)
        except OrderedStreamError as exc:  # the reason on the console before Spark's report
            log_failure(_log, exc)
            raise

    # ---- the foreachBatch function -----------------------------------------------------
    @reason_first_in_callback  # the pack's sentence right after Spark's prefix
    def process_batch(self, batch_df: Any, batch_id: int) -> BatchResult:
        """Process micro-batch ``batch_id`` exactly once; use as ``foreachBatch``'s function.

        Runs on the driver; the ordered stage it starts runs on the executors.
        """
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
        client of its own (about 0.3 CPU-s)."""
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


def read_state(options: OrderedOptions, base: PartitionBase, pid: str,
               ) -> Iterator[tuple[Any, Any]]:
    """``(key, value)`` of every key of Kafka partition ``pid`` at the version ``base`` names,
    from a private read-only copy (works beside a running query). Driver or anywhere."""
    from orderedstream.statestore.base import EMPTY_VERSION

    if base.version == EMPTY_VERSION or base.manifest is None:
        return
    topic, number = split_partition_id(pid)
    store = open_store(options, topic, {(number, base.version): base.manifest})
    try:
        part = store.open_read_only(number, base.version)
    except CorruptStateError as exc:
        raise CorruptStateError(
            f"{exc} (state version {base.version} of Kafka {pid}: state of batches older "
            "than the last keep_batches commit records is deleted by retention)"
        ) from exc
    with part:
        for key, (value, _timeout) in part.range(space=STATE_SPACE):
            yield decode_key(key), value
