"""Executor-side Parquet writing: bounded memory, unique names, never overwrite.

``write_parquet_files(batches, options, attempt)`` consumes an iterator of Arrow RecordBatches
(from ``mapInArrow``, a DataSourceStreamArrowWriter, or a driver-side loop), splits rows by
the ``partition_by`` columns into Hive directories, buffers at most ``row_group_rows`` rows or
``row_group_bytes`` bytes per open file (at most ``max_open_files`` open), rolls files past
``target_file_bytes``, and returns the ``DataFile`` descriptors (picklable). Nothing it writes
is visible until a commit record lists it; a failed or duplicate attempt leaves orphans that
vacuum removes.

Pipelined: a full row group is encoded, compressed and uploaded by one background thread
while the calling thread keeps reading input (from Spark's JVM), so a task's tail after its
last input row is one row group's encode plus the last upload part, not the whole file's.
At most ``_IN_FLIGHT`` row groups wait for that thread (bounded memory); its errors are
raised in the caller. On an object store the file is uploaded in parts of ``_PART_BYTES`` as it
grows, by a second thread (``orderedstream.sinks.upload``), so encoding and uploading overlap.

Runs on executors (or wherever it is called): it only needs the picklable options.
"""

from __future__ import annotations

import datetime
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.spec import AbstractBufferedFile

from orderedstream.core import lazys3, objectstore, threads
from orderedstream.core.datafile import DataFile
from orderedstream.core.storage import is_local
from orderedstream.core.workerheap import freeze_worker_heap
from orderedstream.sinks.filestats import FileStats
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.upload import PartUploader, StagedFile

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Characters Spark's ExternalCatalogUtils.escapePathName escapes in partition values.
_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}
_IN_FLIGHT = 2  # row groups queued for the background writer (memory bound)
_PART_BYTES = 5 * 1024**2  # S3 multipart part size: the minimum S3 accepts
_MAX_PARTS = 5_000  # parts per file at target size (S3 allows 10,000; files overshoot)


def escape_partition_value(value: Any) -> str:
    """Hive/Spark directory text of one partition value.

    Parameters
    ----------
    value
        A partition column's value (datetime, date, bool, None or anything ``str`` takes).

    Returns
    -------
    str
        The value as Spark writes it, the characters Spark escapes as ``%XX``;
        ``__HIVE_DEFAULT_PARTITION__`` for None or an empty string.

    Runs on
    -------
    both"""
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
    staged: StagedFile | None  # object stores: what the writer writes to (parts upload)
    rows: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0
    pending_bytes: int = 0
    submitted: int = 0  # Arrow bytes handed to the background thread (caller's count)
    encoded: int = 0  # ... of which written (background thread's count)
    written_bytes: int = 0  # Parquet bytes written so far (background thread)
    last: Future[Any] | None = None  # this file's latest background job
    stats: FileStats | None = None

    def may_be_full(self, target: int) -> bool:
        """True unless the file is surely below ``target``: Parquet bytes written plus the
        Arrow bytes still queued (an upper bound: encoding compresses)."""
        return self.written_bytes + self.submitted - self.encoded >= target

    def full(self, target: int) -> bool:
        """Exact check: waits for this file's queued row groups first."""
        if self.last is not None:
            self.last.result()
        return self.written_bytes >= target


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
        """Write ``batches`` as Parquet files under ``options.path`` (see the module docstring).

        Parameters
        ----------
        batches
            The rows, partition columns included.

        Returns
        -------
        list of DataFile
            The files written (paths relative to ``options.path``, Delta statistics when
            ``options.file_stats``), none of them listed in a commit yet.

        Raises
        ------
        Exception
            Reading ``batches``, encoding or uploading failed: unfinished uploads are
            aborted, files already written stay orphans, and the error is re-raised.

        Runs on
        -------
        executor (or wherever it is called)"""
        fs, root = lazys3.url_to_fs(self.options.path, self.options.storage_options)
        root = root.rstrip("/")
        open_files: dict[tuple[str, ...], _OpenFile] = {}
        opened: list[_OpenFile] = []
        closing: list[Future[DataFile]] = []
        local = is_local(fs)
        with threads.lend("parquet") as pool, (
                nullcontext(None) if local else threads.lend("upload")) as upload_pool:
            uploader = None if upload_pool is None else PartUploader(upload_pool,
                                                                     in_flight=_IN_FLIGHT)
            inflight: deque[Future[Any]] = deque()

            def submit(job: Callable[..., Any], *args: Any) -> Future[Any]:
                while len(inflight) >= _IN_FLIGHT:  # bounded memory; re-raises its error
                    inflight.popleft().result()
                future = pool.submit(job, *args)
                inflight.append(future)
                return future

            try:
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    for key, values, part in self._split(batch):
                        current = open_files.get(key)
                        if current is None:
                            if len(open_files) >= self.options.max_open_files:
                                victim = max(open_files,
                                             key=lambda k: open_files[k].pending_rows)
                                closing.append(self._close(open_files.pop(victim), submit))
                            current = open_files[key] = self._open(fs, root, values,
                                                                   part.schema, uploader)
                            opened.append(current)
                        current.pending.append(part)
                        current.pending_rows += part.num_rows
                        current.pending_bytes += part.nbytes
                        if (current.pending_rows >= self.options.row_group_rows
                                or current.pending_bytes >= self.options.row_group_bytes):
                            self._flush(current, submit)
                            target = self.options.target_file_bytes
                            if current.may_be_full(target) and current.full(target):
                                closing.append(self._close(open_files.pop(key), submit))
                for key in list(open_files):
                    closing.append(self._close(open_files.pop(key), submit))
                files = [future.result() for future in closing]
                if uploader is not None:
                    uploader.drain()
                return files
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)  # no write races the cleanup
                if uploader is not None:
                    uploader.cancel()
                for leftover in opened:  # orphans; never listed in a commit
                    _abandon(leftover)
                raise

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

    def _open(self, fs: Any, root: str, values: dict[str, str], schema: pa.Schema,
              uploader: PartUploader | None) -> _OpenFile:
        codec = self.options.compression
        subdir = "/".join(f"{c}={v}" for c, v in values.items())
        name = f"part-{self._seq:05d}-{self._run}-{self.attempt}.{codec}.parquet"
        self._seq += 1
        rel = f"{subdir}/{name}" if subdir else name
        staged = None
        if uploader is None:  # local: object stores have no directories to create
            fs.makedirs(f"{root}/{subdir}" if subdir else root, exist_ok=True)
            handle = fs.open(f"{root}/{rel}", "wb")
        else:  # upload parts while the file grows (smaller parts than s3fs's default)
            part = max(_PART_BYTES, -(-self.options.target_file_bytes // _MAX_PARTS))
            path = f"{root}/{rel}"
            if objectstore.native(fs, path):  # one part: one obstore put; more: multipart
                handle = objectstore.SmallObjectFile(  # fs.open only for a second part
                    fs, path, partial(_open_for_write, fs, path, part))
            else:
                handle = fs.open(path, "wb", block_size=part)
            staged = StagedFile(handle, uploader, part)
        writer = pq.ParquetWriter(
            handle if staged is None else staged, schema,
            compression=None if codec == "none" else codec,
            compression_level=self.options.compression_level)
        return _OpenFile(partition=dict(values), rel_path=rel, handle=handle, writer=writer,
                         staged=staged, stats=FileStats() if self.options.file_stats else None)

    def _flush(self, current: _OpenFile, submit: Callable[..., Future[Any]]) -> None:
        """Hand the buffered rows to the background thread as one row group."""
        if not current.pending:
            return
        pending, size = current.pending, current.pending_bytes
        current.rows += current.pending_rows
        current.submitted += size
        current.pending, current.pending_rows, current.pending_bytes = [], 0, 0
        current.last = submit(self._write_group, current, pending, size)

    def _write_group(self, current: _OpenFile, pending: list[pa.RecordBatch],
                     size: int) -> None:
        """Background thread: statistics, encode + compress, upload (as parts fill)."""
        if current.stats is not None:  # Delta output: statistics for the add action
            for batch in pending:
                current.stats.update(batch)
        table = pa.Table.from_batches(pending)
        current.writer.write_table(table, row_group_size=self.options.row_group_rows)
        current.written_bytes = (current.handle if current.staged is None
                                 else current.staged).tell()
        current.encoded += size

    def _close(self, current: _OpenFile, submit: Callable[..., Future[Any]]
               ) -> Future[DataFile]:
        self._flush(current, submit)
        return submit(self._finish, current)

    def _finish(self, current: _OpenFile) -> DataFile:
        """Background thread: footer, last part, complete the upload; the descriptor."""
        current.writer.close()
        if current.staged is not None:
            size = current.staged.complete()
        else:
            size = current.handle.tell()
            current.handle.close()
        return DataFile(path=current.rel_path, size=int(size), rows=current.rows,
                        partition=current.partition,
                        stats=None if current.stats is None else current.stats.to_delta(
                            current.rows))


def _open_for_write(fs: Any, path: str, part: int) -> Any:
    """An fsspec write handle uploading parts of ``part`` bytes (s3fs's multipart upload)."""
    return fs.open(path, "wb", block_size=part)


def _abandon(leftover: _OpenFile) -> None:
    """Failure path: on an object store the unfinished upload is aborted (fsspec's
    ``discard``: no object at all, not a complete object missing its last parts); elsewhere
    the file is closed and left as an orphan, never listed in a commit."""
    handle = leftover.handle
    if getattr(type(handle), "discard", None) not in (None, AbstractBufferedFile.discard):
        # marked closed once discarded, or its __del__ would try to finish the upload
        steps: tuple[Any, ...] = (handle.discard, partial(setattr, handle, "closed", True),
                                  leftover.writer.close)
    else:  # a local file, or a store whose files cannot discard (fsspec's no-op)
        steps = (leftover.writer.close, handle.close)
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - best effort on the failure path
            pass


def write_parquet_files(batches: Iterable[pa.RecordBatch], options: FencedParquetOptions,
                        attempt: str | None = None) -> list[DataFile]:
    """Write ``batches`` as Parquet files under ``options.path``; return their descriptors.

    ``attempt`` goes into every file name (e.g. ``f"p{partition}-a{attempt_number}"``) so task
    retries and speculative copies never collide; a random run id makes names unique anyway.
    In a reused Spark worker the long-lived heap is frozen first (``freeze_worker_heap``: the
    worker's per-task garbage collection skips it).

    Parameters
    ----------
    batches
        The rows as Arrow batches, partition columns included.
    options
        The writer's options (location, partitioning, sizes, codec, ``file_stats``).
    attempt
        Text for the file names; None: ``"a0"``.

    Returns
    -------
    list of DataFile
        The files written, not visible until a commit lists them.

    Raises
    ------
    Exception
        Reading, encoding or uploading failed; unfinished uploads are aborted, files
        already written stay orphans for vacuum (never listed in a commit).

    Runs on
    -------
    executor (or wherever it is called)"""
    freeze_worker_heap()
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
