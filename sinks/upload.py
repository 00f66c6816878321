"""Object-store uploads that overlap Parquet encoding (used by ``orderedstream.sinks.writer``).

pyarrow's ``ParquetWriter`` writes into a ``StagedFile`` (memory). Every whole part of
``part_bytes`` goes at once to the write's one upload thread (``PartUploader``), which writes it
to the fsspec handle; s3fs uploads one multipart part per ``block_size``. So a part uploads
while the next columns and row groups are encoded, instead of the encoder waiting for the
store after every part, which made encoding and upload one serial chain after a task's last
input row (the same aim as docs/decisions/0020-parquet-row-group-bytes.md). At most
``in_flight`` parts wait for the upload thread (bounded memory); an upload's error is raised
in the encoding thread. A file is completed (``handle.close()``) only when every one of its
parts was uploaded: a failed part leaves an unfinished upload, never a complete object
missing a part.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class PartUploader:
    """Upload jobs run in submission order on ``pool`` (one thread, lent by the writer:
    ``orderedstream.core.threads``); ``submit`` waits while ``in_flight`` jobs are queued and
    re-raises the error of any job it waited for."""

    def __init__(self, pool: ThreadPoolExecutor, *, in_flight: int) -> None:
        self._pool = pool
        self._queued: deque[Future[Any]] = deque()
        self._in_flight = in_flight

    def submit(self, job: Callable[..., Any], *args: Any) -> Future[Any]:
        """Queue ``job(*args)`` on the upload thread, first waiting while ``in_flight`` jobs
        are queued.

        Parameters
        ----------
        job
            The upload step (a part's ``handle.write``, or a file's completion).
        *args
            Its arguments.

        Returns
        -------
        concurrent.futures.Future
            The job's future.

        Raises
        ------
        Exception
            The error of a queued job this call waited for (an upload's failure).

        Runs on
        -------
        executor (the encoding thread)"""
        while len(self._queued) >= self._in_flight:
            self._queued.popleft().result()
        future = self._pool.submit(job, *args)
        self._queued.append(future)
        return future

    def drain(self) -> None:
        """Wait for every job submitted (success path; the pool goes back to its lender)."""
        while self._queued:
            self._queued.popleft().result()

    def cancel(self) -> None:
        """Failure path: drop the queued jobs, wait for the running one (the pool is not
        lent again)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


class StagedFile(io.RawIOBase):
    """Write target of one file's ``ParquetWriter``: bytes are buffered until a whole part is
    there, then handed to ``uploader`` for ``handle`` (an fsspec file opened for writing)."""

    def __init__(self, handle: Any, uploader: PartUploader, part_bytes: int) -> None:
        super().__init__()
        self.handle = handle
        self._uploader = uploader
        self._part_bytes = part_bytes
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._total = 0
        self._parts: list[Future[Any]] = []

    def writable(self) -> bool:
        """True: a write-only target."""
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        """Buffer ``data``; hand every whole part now buffered to the uploader.

        Parameters
        ----------
        data
            Bytes-like output of the Parquet writer.

        Returns
        -------
        int
            ``len(data)``: everything is taken.

        Raises
        ------
        Exception
            The error of an earlier upload job that ``PartUploader.submit`` waited for.

        Runs on
        -------
        executor (the encoding thread)"""
        chunk = bytes(data)
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        self._total += len(chunk)
        while self._buffered >= self._part_bytes:
            self._ship(self._part_bytes)
        return len(chunk)

    def tell(self) -> int:
        """Bytes written so far (uploaded or not)."""
        return self._total

    def complete(self) -> int:
        """After the writer's footer: upload the rest, complete the object once all of its
        parts are uploaded; returns the file's size."""
        if self._buffered:
            self._ship(self._buffered)
        self._uploader.submit(self._close_handle).result()
        return self._total

    def _ship(self, size: int) -> None:
        out = bytearray()
        while len(out) < size:
            chunk = self._chunks.popleft()
            need = size - len(out)
            if len(chunk) > need:
                self._chunks.appendleft(chunk[need:])
                chunk = chunk[:need]
            out += chunk
        self._buffered -= size
        self._parts.append(self._uploader.submit(self.handle.write, out))

    def _close_handle(self) -> None:
        """Upload thread, after this file's parts (one thread, in order)."""
        for part in self._parts:
            error = part.exception()
            if error is not None:
                raise error
        self.handle.close()


__all__ = ["PartUploader", "StagedFile"]
