"""The driver-side commit step shared by both entry points.

``prepare_batch`` runs before any file is written (skip a committed replay; check the epoch
and the schema); ``publish_batch`` creates the commit record and then derives
``_spark_metadata``. Both run on the driver: in the foreachBatch function's process, or in
the fresh Python process Spark starts for a Data Source ``commit(messages, batchId)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from orderedstream.core.commitlog import CommitLog, CommitRecord, Epoch
from orderedstream.core.datafile import DataFile
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import decode_schema, encode_schema, evolve
from orderedstream.sinks.table import FencedTable

log = logging.getLogger(__name__)


def table_schema(commit_log: CommitLog) -> pa.Schema | None:
    latest = commit_log.latest_version()
    if latest is None:
        return None
    record = commit_log.read_version(latest)
    return None if record is None or record.schema is None else decode_schema(record.schema)


def check_schema(commit_log: CommitLog, options: FencedParquetOptions,
                 batch_schema: pa.Schema) -> pa.Schema:
    """The table schema after this batch, or SchemaMismatchError (nothing written yet)."""
    return evolve(table_schema(commit_log), batch_schema, f"table {options.path}",
                  options.partition_by)


def publish_batch(commit_log: CommitLog, options: FencedParquetOptions, batch_id: int,
                  epoch: Epoch, files: Iterable[DataFile], schema: pa.Schema,
                  extra: Mapping[str, Any] | None = None) -> CommitRecord:
    """Commit ``files`` as batch ``batch_id`` (exclusive record), then sync _spark_metadata."""
    record = commit_log.commit(batch_id, epoch, list(files), extra,
                               schema=encode_schema(schema))
    sync_spark(commit_log, options)
    return record


def sync_spark(commit_log: CommitLog, options: FencedParquetOptions) -> None:
    """Derive _spark_metadata up to the latest version (also repairs a crash after commit)."""
    FencedTable(options.path, options.storage_options, log=commit_log).sync_spark_metadata(
        options.metadata_compact_interval)
