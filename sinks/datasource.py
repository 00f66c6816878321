"""``fencedparquet``: the streaming Python Data Source sink (same commit protocol as
``foreachBatch``).

Usage::

    (df.writeStream.format("fencedparquet")
       .option("path", "s3://lake/events").option("storageOptions", json.dumps(opts))
       .option("partitionBy", "day").option("checkpointLocation", ckpt).start())

Where each piece runs:
- ``FencedParquetDataSource``: re-created from the options on the driver for planning and for
  every commit; it holds no run state.
- ``streamWriter()``: on the driver, at planning (checks the schema before any task runs) and
  again in the fresh process of every commit.
- ``FencedParquetStreamWriter.write()``: executors; claims the writer epoch if another writer
  identity holds it, writes files, returns ``FencedCommitMessage``.
- ``commit(messages, batchId)``: a fresh Python process on the driver; through the shared
  publish path (``orderedstream.sinks.commit``) it skips a batch this writer already committed
  (``committed_batch``), refuses (FencedError) if another writer identity took the epoch,
  otherwise creates the record exclusively and syncs _spark_metadata (``publish_batch``).

Fencing here is by writer identity (``writerId`` or the checkpoint location), because Spark
keeps no Python state between a batch's planning, tasks and commit: of two queries writing one
path at once, the one whose commit finds the other's claim fails with FencedError. Two runs of
the same query (same checkpoint) replay the same batches; the exclusive record keeps one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, WriterCommitMessage
from pyspark.sql.types import StructType

from orderedstream.core.commitlog import CommitLog
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import FencedError
from orderedstream.core.location import check_location, io_failures_named, open_location
from orderedstream.core.sparkcompat import DataSourceStreamArrowWriter
from orderedstream.core.worker_errors import reason_first_in_worker
from orderedstream.core.workerheap import freeze_worker_heap
from orderedstream.sinks.commit import check_schema, committed_batch, publish_batch
from orderedstream.sinks.deltalog import check_no_other_format
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import spark_to_arrow
from orderedstream.sinks.writer import task_attempt_id, write_parquet_files

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FencedCommitMessage(WriterCommitMessage):
    """What one write task sends to the driver: the files it wrote (picklable)."""

    files: tuple[DataFile, ...]


class FencedParquetDataSource(DataSource):
    """Streaming sink ``format("fencedparquet")``; see the module docstring for options.

    Spark re-creates this object from its options for planning and for every commit, so no
    per-run state can live here: the writer identity is ``writerId``, else the query's
    ``checkpointLocation`` (same query = same checkpoint), and the epoch is owned by identity.
    """

    @reason_first_in_worker  # a refused option: its sentence right after Spark's prefix
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = FencedParquetOptions.from_mapping(options)
        checkpoint = {k.lower(): v for k, v in options.items()}.get("checkpointlocation")
        explicit = any(k.replace("_", "").lower() == "writerid" for k in options)
        self.identity = (self.parsed.writer_id if explicit or not checkpoint
                         else f"checkpoint:{checkpoint.rstrip('/')}")

    @classmethod
    def name(cls) -> str:
        """``"fencedparquet"``: the name ``writeStream.format`` takes."""
        return "fencedparquet"

    @reason_first_in_worker
    def streamWriter(self, schema: StructType, overwrite: bool) -> FencedParquetStreamWriter:
        """The writer of this query's batches. Refuses an incompatible schema, and an output
        location it cannot read or (before the first commit) write, before any task writes a
        file.

        Parameters
        ----------
        schema
            The streaming DataFrame's schema.
        overwrite
            Spark's output mode flag; not used (batches are always appended).

        Returns
        -------
        FencedParquetStreamWriter
            Pickled to the executors for ``write``.

        Raises
        ------
        SchemaMismatchError
            The schema cannot be appended to the table's.
        LocationError
            The output location cannot be read, or (before the first commit) written.
        OptionError
            The location already holds a Delta table.

        Runs on
        -------
        driver (planning, and again in each commit process)"""
        return FencedParquetStreamWriter(self.parsed, schema, self.identity)


class FencedParquetStreamWriter(DataSourceStreamArrowWriter):
    """Pickled to executors for ``write``; rebuilt on the driver for ``commit``."""

    def __init__(self, options: FencedParquetOptions, schema: StructType, identity: str) -> None:
        freeze_worker_heap()  # planner / commit process: Spark collects after every call
        self.options = options
        self.identity = identity
        self.arrow_schema = spark_to_arrow(schema)
        where = "fencedparquet output"
        with io_failures_named(options.path, where):  # a bad path: its URL named, reason first
            open_location(options.path, where, options.storage_options)  # URL, bucket
            commit_log = CommitLog(options.path, options.storage_options)
            self.table_schema = check_schema(commit_log, options, self.arrow_schema)
            if commit_log.latest_version() is None:  # not committed to yet: can it be?
                check_location(options.path, where, options.storage_options)
                check_no_other_format(options.path, options.storage_options,
                                      writing="parquet", who="format('fencedparquet')")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FencedCommitMessage:
        """Take the writer epoch if another writer holds it (that writer's next commit is
        then fenced), write this task's rows as Parquet files (not visible yet).

        Parameters
        ----------
        iterator
            The task's rows as Arrow batches.

        Returns
        -------
        FencedCommitMessage
            The files written, for ``commit``.

        Raises
        ------
        CommitConflictError
            The epoch claim lost too many concurrent races.

        Runs on
        -------
        executor"""
        commit_log = CommitLog(self.options.path, self.options.storage_options)
        current = commit_log.current_epoch()
        if current is None or current.writer_id != self.identity:
            commit_log.claim_epoch(self.identity)
        files = write_parquet_files(iterator, self.options, task_attempt_id())
        return FencedCommitMessage(tuple(files))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Publish batch ``batchId`` exactly once (a replay this writer committed is skipped).

        Parameters
        ----------
        messages
            The write tasks' messages (None for a task that sent none).
        batchId
            The micro-batch id.

        Raises
        ------
        FencedError
            Another writer took the epoch since this batch's tasks ran; nothing is published.
        CommitConflictError
            Another writer committed this batch, or a later batch is committed.

        Runs on
        -------
        driver (a fresh commit process)"""
        commit_log = CommitLog(self.options.path, self.options.storage_options)
        if committed_batch(commit_log, self.options, batchId, owner=self.identity) is not None:
            return  # a replay of a batch this writer committed (_spark_metadata repaired)
        current = commit_log.current_epoch()
        if current is None or current.writer_id != self.identity:
            owner = "nobody" if current is None else repr(current.writer_id)
            raise FencedError(
                f"writer {self.identity!r} is fenced at {self.options.path}: the writer epoch "
                f"{'' if current is None else current.number} is held by {owner}; batch "
                f"{batchId} was not published. Two queries cannot write one path at once.")
        files = [f for m in messages if isinstance(m, FencedCommitMessage) for f in m.files]
        publish_batch(commit_log, self.options, batchId, current, files, self.table_schema,
                      extra={"entry": "datasource"})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the abort; nothing to undo: written files stay orphans until vacuum.

        Parameters
        ----------
        messages
            The messages of the tasks that finished.
        batchId
            The micro-batch id.

        Runs on
        -------
        driver"""
        log.warning("batch %s of %s aborted; its files are orphans for vacuum", batchId,
                    self.options.path)
