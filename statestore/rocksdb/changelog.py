"""Changelog snapshots: a version's writes as a small file replayed on top of a checkpoint.

With ``StateStoreOptions(changelog=True)`` a commit uploads only the puts and deletes of that
version (one append-only file, streamed to local disk while the batch runs, so memory stays
bounded) instead of the SST files a checkpoint produced. Bytes uploaded then follow the bytes
changed even when RocksDB's compactions rewrite large SSTs. A full checkpoint is still taken
every ``snapshot_interval`` versions, so a restore replays at most that many changelogs.

File format: a zstd stream holding (big-endian) the magic ``OSCL1\\n``, then records
``op:u8 space:u16`` followed by ``klen:u32 key`` (``DELETE``), ``klen:u32 vlen:u32 key value``
(``PUT``) or ``len:u16 name`` (``SPACE``: defines the space id used by later records; ids are
per file). The compressed file's sha256 is recorded in the manifest and checked on download
like any SST.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import rocksdict

from orderedstream.core.errors import CorruptStateError

MAGIC = b"OSCL1\n"
COMPRESSION = "zstd"
PUT, DELETE, SPACE = 1, 2, 3
_HEAD = struct.Struct(">BH")
_PUT = struct.Struct(">BHII")
_DEL = struct.Struct(">BHI")
_U16 = struct.Struct(">H")
_BUFFER = 1 << 20
_REPLAY_CHUNK = 10_000
_REPLAY_BYTES = 32 << 20


class ChangelogWriter:
    """Appends one version's writes to ``path``, zstd-compressed in 1 MiB chunks (memory stays
    bounded whatever the batch size); ``close`` finishes the stream (and fsyncs it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._out: Any = pa.output_stream(path, compression=COMPRESSION)
        self._buf = bytearray(MAGIC)
        self._ids: dict[str, int] = {}

    def space_id(self, space: str) -> int:
        """The id of ``space`` in this file, defining it on first use.

        Parameters
        ----------
        space
            The state space (column family) name.

        Runs on
        -------
        executor (the task writing the partition)"""
        sid = self._ids.get(space)
        if sid is None:
            sid = self._ids[space] = len(self._ids)
            name = space.encode()
            self._buf += _HEAD.pack(SPACE, sid) + _U16.pack(len(name)) + name
        return sid

    def put(self, space: str, key: bytes, stored: bytes) -> None:
        """Log a put (buffered; handed to the compressor once the buffer is full).

        Parameters
        ----------
        space, key
            Where the value was stored.
        stored
            The value's bytes as stored (encoded by the space's codec).

        Runs on
        -------
        executor (the task writing the partition)"""
        sid = self._ids.get(space)
        if sid is None:
            sid = self.space_id(space)
        buf = self._buf
        buf += _PUT.pack(PUT, sid, len(key), len(stored))
        buf += key
        buf += stored
        if len(buf) >= _BUFFER:
            self._spill()

    def delete(self, space: str, key: bytes) -> None:
        """Log a delete (buffered like ``put``).

        Parameters
        ----------
        space, key
            The deleted key and its space.

        Runs on
        -------
        executor (the task writing the partition)"""
        sid = self._ids.get(space)
        if sid is None:
            sid = self.space_id(space)
        buf = self._buf
        buf += _DEL.pack(DELETE, sid, len(key))
        buf += key
        if len(buf) >= _BUFFER:
            self._spill()

    def _spill(self) -> None:
        """Hand the buffered records to the compressor (bounds the log's memory)."""
        self._out.write(self._buf)
        self._buf.clear()

    def close(self, *, sync: bool = True) -> int:
        """Finish the compressed stream and (``sync``) fsync it; returns the file size. A log
        whose bytes go into its version's manifest is discarded after: no fsync (``sync``).

        Parameters
        ----------
        sync
            fsync the file after finishing it.

        Raises
        ------
        OSError
            Writing or syncing the file failed.

        Runs on
        -------
        executor (the committing task)"""
        if not self._out.closed:
            self._out.write(self._buf)
            self._buf.clear()
            self._out.close()
            if sync:
                self.sync()
        return os.path.getsize(self.path)

    def sync(self) -> None:
        """fsync the finished log (it stays in the local copy's cache once uploaded)."""
        with open(self.path, "rb") as handle:
            os.fsync(handle.fileno())

    def discard(self) -> None:
        """Close the stream if open and delete the file (a version that will not use it).

        Runs on
        -------
        executor"""
        if not self._out.closed:
            self._out.close()
        Path(self.path).unlink(missing_ok=True)


def replay(db: rocksdict.Rdict, path: str,
           family: Callable[[str], tuple[Any, rocksdict.Rdict]]) -> int:
    """Apply the changelog at ``path`` to ``db`` in WriteBatches; returns records applied.

    ``family(name)`` returns ``(column family handle, column family)`` for a space, creating
    the family when the DB lacks it. Reads 1 MiB of decompressed bytes at a time and parses
    every whole record in it (a record larger than that is read across chunks).

    Parameters
    ----------
    db
        The partition's DB, opened at the log's parent version.
    path
        The local changelog file (verified against its manifest entry by the caller).
    family
        ``family(name)`` -> ``(column family handle, column family)`` for a space.

    Returns
    -------
    int
        Records applied.

    Raises
    ------
    CorruptStateError
        The file is not a zstd changelog, is truncated, or holds an unknown record type or a
        record of an undefined space.

    Runs on
    -------
    both (where a version is restored)"""
    applied = pending = pending_bytes = 0
    handles: dict[int, Any] = {}
    batch = rocksdict.WriteBatch(raw_mode=True)
    head_at, put_at, del_at, u16_at = (_HEAD.unpack_from, _PUT.unpack_from, _DEL.unpack_from,
                                       _U16.unpack_from)
    try:
        stream = pa.input_stream(path, compression=COMPRESSION)
        data = stream.read(max(_BUFFER, len(MAGIC)))
        if data[:len(MAGIC)] != MAGIC:
            raise CorruptStateError(f"state changelog {path} does not start with {MAGIC!r}")
        pos = len(MAGIC)
        while True:
            size = len(data)
            while pos + 3 <= size:
                op, sid = head_at(data, pos)
                if op == SPACE:
                    if pos + 5 > size:
                        break
                    (length,) = u16_at(data, pos + 3)
                    end = pos + 5 + length
                    if end > size:
                        break
                    handles[sid] = family(data[pos + 5:end].decode())[0]
                    pos = end
                    continue
                if op == PUT:
                    if pos + 11 > size:
                        break
                    _, _, klen, vlen = put_at(data, pos)
                    key_at = pos + 11
                    end = key_at + klen + vlen
                elif op == DELETE:
                    if pos + 7 > size:
                        break
                    _, _, klen = del_at(data, pos)
                    key_at = pos + 7
                    end = key_at + klen
                else:
                    raise CorruptStateError(f"state changelog {path}: unknown record type {op} "
                                            f"after {applied} records")
                if end > size:
                    break
                cf = handles.get(sid)
                if cf is None:
                    raise CorruptStateError(f"state changelog {path}: record of undefined "
                                            f"space {sid} after {applied} records")
                if op == PUT:
                    batch.put(data[key_at:key_at + klen], data[key_at + klen:end], cf)
                else:
                    batch.delete(data[key_at:end], cf)
                pending_bytes += end - pos
                pos = end
                applied += 1
                pending += 1
                if pending >= _REPLAY_CHUNK or pending_bytes >= _REPLAY_BYTES:
                    db.write(batch)
                    batch = rocksdict.WriteBatch(raw_mode=True)
                    pending = pending_bytes = 0
            more = stream.read(_BUFFER)
            if not more:
                if pos != size:
                    raise CorruptStateError(f"state changelog {path} is truncated (a partial "
                                            f"record after {applied} records)")
                break
            data, pos = data[pos:] + more, 0
    except OSError as exc:  # pyarrow: not a zstd stream, or a damaged one
        raise CorruptStateError(f"state changelog {path} cannot be decompressed: {exc}") from exc
    if pending:
        db.write(batch)
    return applied
