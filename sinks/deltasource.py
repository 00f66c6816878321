"""``fenceddelta``: the streaming Python Data Source sink writing a Delta Lake table.

Usage::

    (df.writeStream.format("fenceddelta")
       .option("path", "s3://lake/events").option("storageOptions", json.dumps(opts))
       .option("writerId", "events").option("partitionBy", "day")
       .option("checkpointLocation", ckpt).start())

The name does not collide with delta-spark's ``delta``. Where each piece runs:

- ``streamWriter()``: the driver, at planning and again in the fresh process of each commit:
  checks the schema (adding new nullable columns) before any task writes a file.
- ``write()``: executors; writes Parquet files with Delta statistics (invisible until the
  commit) and returns them with the Kafka offset ranges of the rows written (when the frame
  has ``topic`` / ``partition`` / ``offset`` columns).
- ``commit(messages, batchId)``: the driver; through ``orderedstream.sinks.deltacommit`` (the
  design is in its docstring) ONE Delta commit with the add actions and the application
  transaction ``(writerId, batchId)``. A batch already committed with the same offsets is a
  replay and is skipped; with other offsets it is refused (``CommitConflictError``): another
  checkpoint writes the table under the same ``writerId``.

``writerId`` (default ``"default"``) is the stream's stable name: keep it across restarts,
give a query with a new checkpoint a new one.

Spark reuses its Python planner and commit processes across micro-batches, so each process
keeps its ``DeltaCommitter`` per table and writer id (a few, dropped after any error) and
brings the loaded delta-rs table up to date (``update_incremental``) instead of reading the
table again every batch. Each decision still reads the log's latest versions, as the
foreachBatch writer's long-lived committer does. Those processes (and the executors' workers,
in ``write_parquet_files``) freeze their long-lived heap (``orderedstream.core.workerheap``):
Spark's full garbage collection after every call then skips pyarrow's, botocore's and
delta-rs's long-lived objects instead of walking them all again each time.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import DataSource, WriterCommitMessage
from pyspark.sql.types import StructType

from orderedstream.core.datafile import DataFile
from orderedstream.core.location import check_location, io_failures_named, open_location
from orderedstream.core.sparkcompat import DataSourceStreamArrowWriter
from orderedstream.core.worker_errors import reason_first_in_worker
from orderedstream.core.workerheap import freeze_worker_heap
from orderedstream.sinks.deltacommit import (
    DeltaCommitter,
    DeltaPrepared,
    arrow_offsets,
    merge_offsets,
)
from orderedstream.sinks.deltafiles import check_delta_writes
from orderedstream.sinks.deltalog import check_no_other_format
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import spark_to_arrow
from orderedstream.sinks.writer import task_attempt_id, write_parquet_files

log = logging.getLogger(__name__)

_COMMITTERS: OrderedDict[str, DeltaCommitter] = OrderedDict()
_KEEP = 8  # committers (tables x writer ids) kept per process


def _shared_committer(options: FencedParquetOptions) -> DeltaCommitter:
    """This process's committer for ``options`` (table, writer id, storage options)."""
    key = repr(options)
    committer = _COMMITTERS.pop(key, None) or DeltaCommitter(options, app_id=options.writer_id)
    _COMMITTERS[key] = committer
    while len(_COMMITTERS) > _KEEP:
        _COMMITTERS.popitem(last=False)
    return committer


def _forget(options: FencedParquetOptions) -> None:
    """After an error: the next batch starts from a freshly loaded table."""
    _COMMITTERS.pop(repr(options), None)


@dataclass(frozen=True)
class DeltaCommitMessage(WriterCommitMessage):
    """One write task's files and the offset ranges of its rows (picklable)."""

    files: tuple[DataFile, ...]
    offsets: tuple[tuple[str, int, int], ...]


class FencedDeltaDataSource(DataSource):
    """Streaming sink ``format("fenceddelta")``; options as ``fencedparquet``'s."""

    @reason_first_in_worker  # a refused option: its sentence right after Spark's prefix
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = replace(FencedParquetOptions.from_mapping(options, sink="fenceddelta"),
                              file_stats=True)

    @classmethod
    def name(cls) -> str:
        """``"fenceddelta"``: the name ``writeStream.format`` takes."""
        return "fenceddelta"

    @reason_first_in_worker
    def streamWriter(self, schema: StructType, overwrite: bool) -> FencedDeltaStreamWriter:
        """The writer of this query's batches: checks the schema (adding new nullable
        columns) and, before the first commit, that the location can be written.

        Parameters
        ----------
        schema
            The streaming DataFrame's schema.
        overwrite
            Spark's output mode flag; not used (batches are always appended).

        Returns
        -------
        FencedDeltaStreamWriter
            Pickled to the executors for ``write``, without its delta-rs handle.

        Raises
        ------
        SchemaMismatchError
            The schema or partition columns cannot be appended to the table's.
        LocationError
            The output location cannot be read, or (before the first commit) written.
        OptionError
            The location already holds a fenced Parquet table.
        CommitConflictError
            Adding new columns lost too many concurrent commits.

        Runs on
        -------
        driver (planning, and again in each commit process)"""
        return FencedDeltaStreamWriter(self.parsed, schema)


class FencedDeltaStreamWriter(DataSourceStreamArrowWriter):
    """Pickled to executors for ``write``; rebuilt on the driver for ``commit``."""

    def __init__(self, options: FencedParquetOptions, schema: StructType) -> None:
        freeze_worker_heap()  # planner / commit process: Spark collects after every call
        self.options = options
        self.arrow_schema = spark_to_arrow(schema)
        self._committer: DeltaCommitter | None = _shared_committer(options)
        where = "fenceddelta output"
        try:
            with io_failures_named(options.path, where):  # a bad path: named, reason first
                open_location(options.path, where, options.storage_options)  # URL, bucket
                self.table_schema = self._committer.check_schema(self.arrow_schema)
                if not self._committer.has_table:  # not committed to yet: can it be?
                    check_location(options.path, where, options.storage_options)
                    check_delta_writes(options.path, where, options.storage_options)
                    check_no_other_format(options.path, options.storage_options,
                                          writing="delta", who="format('fenceddelta')")
        except BaseException:
            _forget(options)
            raise

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_committer"] = None  # a driver-side delta-rs handle: never sent to executors
        return state

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaCommitMessage:
        """Write this task's rows as Delta data files (not visible until the commit).

        Parameters
        ----------
        iterator
            The task's rows as Arrow batches.

        Returns
        -------
        DeltaCommitMessage
            The files written and the Kafka offset ranges of their rows (none without
            ``topic`` / ``partition`` / ``offset`` columns).

        Runs on
        -------
        executor"""
        seen: list[dict[str, list[int]]] = []

        def tap(source: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in source:
                found = arrow_offsets(batch)
                if found:
                    seen.append(found)
                yield batch

        files = write_parquet_files(tap(iterator), self.options, task_attempt_id())
        merged = merge_offsets(seen)
        return DeltaCommitMessage(tuple(files), tuple((k, v[0], v[1]) for k, v in
                                                      sorted(merged.items())))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Make batch ``batchId``'s one Delta commit; a replay with the committed offset
        ranges is skipped. After an error the next batch loads the table afresh.

        Parameters
        ----------
        messages
            The write tasks' messages (None for a task that sent none).
        batchId
            The micro-batch id (the application transaction's version).

        Raises
        ------
        CommitConflictError
            The batch is committed with other offset ranges, a later batch is committed, or
            another attempt committed it first; nothing of this attempt is visible.
        SchemaMismatchError
            The files hold nulls in NOT NULL columns; nothing is committed.

        Runs on
        -------
        driver (a commit process)"""
        mine = [m for m in messages if isinstance(m, DeltaCommitMessage)]
        offsets = merge_offsets({k: [a, b] for k, a, b in m.offsets} for m in mine)
        committer = self._committer or _shared_committer(self.options)
        try:
            if committer.committed(int(batchId), lambda: offsets) is not None:
                return  # a replay of a committed batch with the same offsets
            # The schema was checked (and new columns added) when this writer was built, in
            # this same commit process: no second check.
            prepared = DeltaPrepared(batch_id=int(batchId), schema=self.table_schema,
                                     token=uuid.uuid4().hex)
            committer.publish(prepared, [f for m in mine for f in m.files], offsets=offsets,
                              extra={"entry": "datasource"})
        except BaseException:
            _forget(self.options)
            raise

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the abort; nothing to undo: written files stay unreferenced until vacuum.

        Parameters
        ----------
        messages
            The messages of the tasks that finished.
        batchId
            The micro-batch id.

        Runs on
        -------
        driver"""
        log.warning("batch %s of %s aborted; its files are left for vacuum", batchId,
                    self.options.path)


__all__ = ["DeltaCommitMessage", "FencedDeltaDataSource", "FencedDeltaStreamWriter"]
