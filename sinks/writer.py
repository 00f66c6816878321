"""Executor-side Parquet writing: bounded memory, unique names, never overwrite.

``write_parquet_files(batches, options, attempt)`` consumes an iterator of Arrow RecordBatches
(from ``mapInArrow``, a DataSourceStreamArrowWriter, or a driver-side loop), splits rows by
the ``partition_by`` columns into Hive directories, buffers at most ``row_group_rows`` rows per
open file (at most ``max_open_files`` open), rolls files past ``target_file_bytes``, and returns
the ``DataFile`` descriptors (picklable). Nothing it writes is visible until a commit record
lists it; a failed or duplicate attempt leaves orphans that vacuum removes.

Runs on executors (or wherever it is called): it only needs the picklable options.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from orderedstream.core.datafile import DataFile
from orderedstream.core.storage import is_local
from orderedstream.sinks.filestats import FileStats
from orderedstream.sinks.options import FencedParquetOptions

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Characters Spark's ExternalCatalogUtils.escapePathName escapes in partition values.
_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}


def escape_partition_value(value: Any) -> str:
    """Hive/Spark directory text of one partition value."""
    if value is None:
        return HIVE_NULL
    if isinstance(value, datetime.datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".")
    elif isinstance(value, datetime.date):
        text = value.isoformat()
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if text == "":
        return HIVE_NULL
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPE else ch for ch in text)


@dataclass
class _OpenFile:
    partition: dict[str, str]
    rel_path: str
    handle: Any
    writer: pq.ParquetWriter
    rows: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0
    stats: FileStats | None = None


class ParquetFileWriter:
    """Writes one task's rows as Parquet files under unique names; see ``write_parquet_files``.

    Picklable before ``write`` starts (it holds only options and the attempt id).
    """

    def __init__(self, options: FencedParquetOptions, attempt: str | None = None) -> None:
        self.options = options
        self.attempt = attempt or "a0"
        self._run = uuid.uuid4().hex
        self._seq = 0

    def write(self, batches: Iterable[pa.RecordBatch]) -> list[DataFile]:
        fs, root = fsspec.core.url_to_fs(self.options.path, **self.options.storage_options)
        root = root.rstrip("/")
        open_files: dict[tuple[str, ...], _OpenFile] = {}
        done: list[DataFile] = []
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                for key, values, part in self._split(batch):
                    current = open_files.get(key)
                    if current is None:
                        if len(open_files) >= self.options.max_open_files:
                            victim = max(open_files, key=lambda k: open_files[k].pending_rows)
                            done.append(self._close(open_files.pop(victim)))
                        current = open_files[key] = self._open(fs, root, values, part.schema)
                    current.pending.append(part)
                    current.pending_rows += part.num_rows
                    if current.pending_rows >= self.options.row_group_rows:
                        self._flush(current)
                        if current.handle.tell() >= self.options.target_file_bytes:
                            done.append(self._close(open_files.pop(key)))
            for key in list(open_files):
                done.append(self._close(open_files.pop(key)))
        except BaseException:
            for leftover in open_files.values():  # orphans; never listed in a commit
                try:
                    leftover.writer.close()
                    leftover.handle.close()
                except Exception:  # noqa: BLE001 - best effort on the failure path
                    pass
            raise
        return done

    def _split(self, batch: pa.RecordBatch
               ) -> Iterator[tuple[tuple[str, ...], dict[str, str], pa.RecordBatch]]:
        cols = self.options.partition_by
        if not cols:
            yield (), {}, batch
            return
        data_cols = [n for n in batch.schema.names if n not in cols]
        table = pa.Table.from_batches([batch])
        keys = table.select(list(cols)).group_by(list(cols), use_threads=False).aggregate([])
        for row in keys.to_pylist():
            mask = None
            for col in cols:
                value = row[col]
                cond = pc.is_null(table[col]) if value is None else pc.equal(table[col], value)
                cond = pc.fill_null(cond, False)
                mask = cond if mask is None else pc.and_(mask, cond)
            part = table.filter(mask).select(data_cols).combine_chunks()
            values = {c: escape_partition_value(row[c]) for c in cols}
            for piece in part.to_batches():
                yield tuple(values[c] for c in cols), values, piece

    def _open(self, fs: Any, root: str, values: dict[str, str], schema: pa.Schema) -> _OpenFile:
        codec = self.options.compression
        subdir = "/".join(f"{c}={v}" for c, v in values.items())
        name = f"part-{self._seq:05d}-{self._run}-{self.attempt}.{codec}.parquet"
        self._seq += 1
        rel = f"{subdir}/{name}" if subdir else name
        if is_local(fs):  # object stores have no directories to create
            fs.makedirs(f"{root}/{subdir}" if subdir else root, exist_ok=True)
        handle = fs.open(f"{root}/{rel}", "wb")
        writer = pq.ParquetWriter(
            handle, schema, compression=None if codec == "none" else codec,
            compression_level=self.options.compression_level)
        return _OpenFile(partition=dict(values), rel_path=rel, handle=handle, writer=writer,
                         stats=FileStats() if self.options.file_stats else None)

    def _flush(self, current: _OpenFile) -> None:
        if not current.pending:
            return
        if current.stats is not None:  # Delta output: statistics for the add action
            for batch in current.pending:
                current.stats.update(batch)
        table = pa.Table.from_batches(current.pending)
        current.writer.write_table(table, row_group_size=self.options.row_group_rows)
        current.rows += table.num_rows
        current.pending = []
        current.pending_rows = 0

    def _close(self, current: _OpenFile) -> DataFile:
        self._flush(current)
        current.writer.close()
        size = current.handle.tell()
        current.handle.close()
        return DataFile(path=current.rel_path, size=int(size), rows=current.rows,
                        partition=current.partition,
                        stats=None if current.stats is None else current.stats.to_delta(
                            current.rows))


def write_parquet_files(batches: Iterable[pa.RecordBatch], options: FencedParquetOptions,
                        attempt: str | None = None) -> list[DataFile]:
    """Write ``batches`` as Parquet files under ``options.path``; return their descriptors.

    ``attempt`` goes into every file name (e.g. ``f"p{partition}-a{attempt_number}"``) so task
    retries and speculative copies never collide; a random run id makes names unique anyway.
    """
    return ParquetFileWriter(options, attempt).write(batches)


def task_attempt_id() -> str:
    """``p<partition>-a<attempt>-t<taskAttemptId>`` inside a Spark task, else a random id."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except Exception:  # noqa: BLE001 - not inside Spark
        ctx = None
    if ctx is None:
        return "d" + uuid.uuid4().hex[:8]
    return f"p{ctx.partitionId()}-a{ctx.attemptNumber()}-t{ctx.taskAttemptId()}"
