"""The ONE publish path of a batch, shared by every writer of a fenced table.

The ``foreachBatch`` writer (``orderedstream.sinks.foreach``), the ``fencedparquet`` Data
Source (``orderedstream.sinks.datasource``) and the ordered stage
(``orderedstream.statestore.ordered``) all publish batch N with these driver-side steps:

1. ``prepare_batch``, before any file is written: ``committed_batch`` (a replay of a committed
   batch is skipped, after its ``_spark_metadata`` is repaired; batch ids must grow), then the
   run's writer epoch (claimed at its first batch, checked at the later ones), then the table
   schema after this batch (``check_schema``). The Data Source runs the same checks, split over
   planning (schema) and its commit process (replay, epoch by writer identity).
2. ``publish_batch``, after the executors wrote their files: create N's commit record
   exclusively (the data files, plus ``extra``: the ordered stage's per-partition state
   manifests), THEN derive ``_spark_metadata`` from the records. The record is the truth; a
   crash between the two is repaired by the replay's ``committed_batch`` (or the next batch).

They run in the foreachBatch function's process, or in the fresh Python process Spark starts
for a Data Source ``commit(messages, batchId)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from orderedstream.core.commitlog import CommitLog, CommitRecord, Epoch
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CommitConflictError
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import decode_schema, encode_schema, evolve
from orderedstream.sinks.table import FencedTable

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PreparedBatch:
    """A batch that is not committed yet and may be written: the epoch to commit it with, and
    the table schema after it (the record's schema)."""

    batch_id: int
    epoch: Epoch
    schema: pa.Schema


def table_schema(commit_log: CommitLog) -> pa.Schema | None:
    """The table's schema as of its latest version.

    Parameters
    ----------
    commit_log
        The table's fenced commit log.

    Returns
    -------
    pyarrow.Schema or None
        The latest record's schema; None when there is no version (or it stores none).

    Raises
    ------
    CorruptLogError
        The latest record cannot be read.

    Runs on
    -------
    driver"""
    latest = commit_log.latest_version()
    if latest is None:
        return None
    record = commit_log.read_version(latest)
    return None if record is None or record.schema is None else decode_schema(record.schema)


def check_schema(commit_log: CommitLog, options: FencedParquetOptions,
                 batch_schema: pa.Schema) -> pa.Schema:
    """The table schema after this batch (``schema.evolve`` on the latest record's schema).

    Parameters
    ----------
    commit_log
        The table's fenced commit log.
    options
        The writer's options (``path`` for errors, ``partition_by``).
    batch_schema
        The batch's Arrow schema.

    Returns
    -------
    pyarrow.Schema
        The schema to record with the batch.

    Raises
    ------
    SchemaMismatchError
        The batch cannot be appended; raised before any file is written.

    Runs on
    -------
    driver"""
    return evolve(table_schema(commit_log), batch_schema, f"table {options.path}",
                  options.partition_by)


def committed_batch(commit_log: CommitLog, options: FencedParquetOptions, batch_id: int, *,
                    owner: str | None) -> CommitRecord | None:
    """The record of ``batch_id`` when it is committed (a replay: skip the batch), else None.

    On a replay ``_spark_metadata`` is derived first, in case the run that committed died
    before deriving it. ``owner``: the writer id the record must carry (another writer's record
    is a CommitConflictError: another query writes this path); None accepts any writer. The
    ordered stage passes None, as before: its writer ids are unique per run, so it cannot tell
    its own earlier run's record from another query's, and a second query with another
    checkpoint on the same output and state would have its batch N skipped. Comparing the
    committed Kafka offset ranges with the replay's closes that (the Delta commits do).
    A later batch already committed is a CommitConflictError as well: batch ids must grow.

    Parameters
    ----------
    commit_log
        The table's fenced commit log.
    options
        The writer's options (``path``, ``_spark_metadata`` interval).
    batch_id
        The batch about to be written.
    owner
        The writer id the record must carry; None accepts any writer.

    Returns
    -------
    CommitRecord or None
        The committed record (skip the batch), or None when the batch is new.

    Raises
    ------
    CommitConflictError
        Another writer committed ``batch_id``, or a later batch is committed.

    Runs on
    -------
    driver"""
    existing = commit_log.get(batch_id)
    if existing is not None:
        if owner is not None and existing.writer_id != owner:
            raise CommitConflictError(
                f"batch {batch_id} of {options.path} was already committed by writer "
                f"{existing.writer_id!r}, not {owner!r}: another query writes this path (a "
                "query with a fresh checkpoint needs a fresh path)")
        log.info("batch %s of %s is already committed (version %s); replay skipped",
                 batch_id, options.path, existing.version)
        sync_spark(commit_log, options)
        return existing
    latest = commit_log.latest()
    if latest is not None and latest > batch_id:
        raise CommitConflictError(
            f"batch {batch_id} arrived but batch {latest} is already committed at "
            f"{options.path}: batch ids must grow. A query with a fresh checkpoint needs a "
            "fresh output path (and, for the ordered stage, a fresh state_location)")
    return None


def writer_epoch(commit_log: CommitLog, epoch: Epoch | None, *, writer_id: str) -> Epoch:
    """This run's epoch: claimed as ``writer_id`` at its first batch (which fences every
    older run), checked at each later one.

    Parameters
    ----------
    commit_log
        The table's fenced commit log.
    epoch
        The epoch this run holds; None before its first batch.
    writer_id
        The writer that claims.

    Returns
    -------
    Epoch
        The run's epoch (``epoch`` itself once claimed).

    Raises
    ------
    FencedError
        A newer run claimed an epoch after ``epoch``.
    CommitConflictError
        The claim lost too many concurrent races.

    Runs on
    -------
    driver"""
    if epoch is None:
        return commit_log.claim_epoch(writer_id)
    commit_log.check_epoch(epoch)
    return epoch


def prepare_batch(commit_log: CommitLog, options: FencedParquetOptions, batch_id: int,
                  batch_schema: pa.Schema, *, epoch: Epoch | None, writer_id: str,
                  owner: str | None) -> CommitRecord | PreparedBatch:
    """Step 1 on the driver, before any file is written: the committed record of a replayed
    batch (skip it), else the epoch and schema to publish it with (see ``committed_batch``,
    ``check_schema``, ``writer_epoch``). The schema is checked before the epoch is claimed:
    a refused batch must not fence the healthy run writing this table.

    Parameters
    ----------
    commit_log
        The table's fenced commit log.
    options
        The writer's options.
    batch_id
        The batch about to be written.
    batch_schema
        The batch's Arrow schema.
    epoch
        The epoch this run holds; None before its first batch.
    writer_id
        The writer that claims the epoch.
    owner
        The writer id a replayed record must carry (``committed_batch``).

    Returns
    -------
    CommitRecord or PreparedBatch
        The committed record of a replay (skip the batch), else what to publish it with.

    Raises
    ------
    CommitConflictError
        Another writer committed the batch, or a later batch is committed.
    SchemaMismatchError
        The batch's schema cannot be appended.
    FencedError
        A newer run claimed the writer epoch.

    Runs on
    -------
    driver"""
    existing = committed_batch(commit_log, options, batch_id, owner=owner)
    if existing is not None:
        return existing
    # The schema first (it only reads the log): a run whose batch is refused must not claim
    # the epoch, which would fence the healthy run writing this table.
    schema = check_schema(commit_log, options, batch_schema)
    current = writer_epoch(commit_log, epoch, writer_id=writer_id)
    return PreparedBatch(batch_id=batch_id, epoch=current, schema=schema)


def publish_batch(commit_log: CommitLog, options: FencedParquetOptions, batch_id: int,
                  epoch: Epoch, files: Iterable[DataFile], schema: pa.Schema, *,
                  extra: Mapping[str, Any] | None = None) -> CommitRecord:
    """Step 2: commit ``files`` (and ``extra``) as batch ``batch_id`` by creating its record
    exclusively, then derive ``_spark_metadata`` from it.

    Parameters
    ----------
    commit_log
        The table's fenced commit log.
    options
        The writer's options (``path``, ``_spark_metadata`` interval).
    batch_id
        The batch to publish.
    epoch
        The epoch ``prepare_batch`` returned.
    files
        The data files the executors wrote.
    schema
        The table schema after the batch.
    extra
        JSON stored verbatim in the record (e.g. the ordered stage's state manifests).

    Returns
    -------
    CommitRecord
        The batch's record (also when this epoch had created it already).

    Raises
    ------
    FencedError
        A newer run claimed the epoch; nothing is published.
    CommitConflictError
        Another writer committed this batch or a later one first; nothing is published.

    Runs on
    -------
    driver"""
    record = commit_log.commit(batch_id, epoch, list(files), extra,
                               schema=encode_schema(schema))
    sync_spark(commit_log, options)
    return record


def sync_spark(commit_log: CommitLog, options: FencedParquetOptions) -> int:
    """Derive _spark_metadata up to the latest version (also repairs a crash after commit).

    Parameters
    ----------
    commit_log
        The table's fenced commit log.
    options
        The writer's options (``path``, ``storage_options``, ``metadata_compact_interval``).

    Returns
    -------
    int
        How many ``_spark_metadata`` entries were written.

    Raises
    ------
    CorruptLogError
        A record or an existing ``_spark_metadata`` entry cannot be read.

    Runs on
    -------
    driver"""
    table = FencedTable(options.path, options.storage_options, log=commit_log)
    return table.sync_spark_metadata(options.metadata_compact_interval)


__all__ = ["PreparedBatch", "check_schema", "committed_batch", "prepare_batch", "publish_batch",
           "sync_spark", "table_schema", "writer_epoch"]
