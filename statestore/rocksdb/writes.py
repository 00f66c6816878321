"""Writes without a TTL, and exact key counts: the blind-put buffer, the write of a
read-modify-write, ``put_many``'s chunked WriteBatches and ``delete``.

Writes go to the DB with the WAL off. Blind ``put``s go through a small WriteBatch buffer
(one space, at most ``_BUFFER_PUTS`` puts or ``_BUFFER_BYTES``), written with the key-count
lookups of its keys as one MultiGet before any read, delete, other write path or commit
(``_flush``). The ``put`` of a key the partition just read is written at once (its presence is
known). With exact key counting, a write counts the keys it adds; the presence memo of
``Space`` spares re-reading keys just read or written. In changelog mode every write is also
appended to the version's log, after it reached the DB.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from itertools import islice
from typing import Any

import rocksdict

from orderedstream.core.errors import InvariantError
from orderedstream.statestore import ttl as ttl_mod
from orderedstream.statestore.base import DEFAULT_SPACE, Key
from orderedstream.statestore.rocksdb.db import PartitionDB, Space, encode_key

CHUNK = 10_000
"""Items of one ``put_many`` WriteBatch (also the TTL path's chunk)."""
_BUFFER_PUTS = 1_000
_BUFFER_BYTES = 4 << 20
_NO_TTL = ttl_mod.NO_TTL
_BARE = ttl_mod.BARE


class Writes(PartitionDB):
    """``put``, ``put_many`` and ``delete``; writes with a TTL are ``expiry``'s."""

    @abc.abstractmethod
    def _put_ttl(self, s: Space, k: bytes, value: Any, ttl_ms: int,
                 now_ms: int | None) -> None:
        """A put with an expiry (``expiry``)."""

    @abc.abstractmethod
    def _put_many_ttl(self, s: Space, items: Iterable[tuple[Key, Any]], ttl_ms: int,
                      now_ms: int | None) -> None:
        """``put_many`` with an expiry (``expiry``)."""

    def _flush(self) -> None:
        """Write the buffered puts (counting the keys they add), so reads see them."""
        batch, s = self._pending, self._pending_space
        if batch is None:
            return
        if s is None:
            raise InvariantError(f"state partition {self.partition}: the write buffer holds "
                                 f"{batch.len()} puts but no space")
        keys, written = self._pending_keys, self._pending_bytes
        self._pending, self._pending_space, self._pending_keys = None, None, []
        self._pending_bytes = 0
        s.last_read = None  # the batch may hold that key: its presence is no longer known
        self._apply(s, batch, keys, batch.len(), written)  # keys: exact counting only

    def _apply(self, s: Space, batch: rocksdict.WriteBatch, keys: list[bytes], n: int,
               written: int) -> None:
        """Write one batch of ``n`` puts; with exact counting, count the ``keys`` that were
        absent before it (each distinct key once; the presence memo spares re-reads)."""
        known = s.known
        new: set[bytes] = set()
        if known is not None:
            unknown = keys
            if known:  # keys read (or written) just before need no second read
                unknown = []
                for k in keys:
                    p = known.get(k)
                    if p is None:
                        unknown.append(k)
                    elif not p:
                        new.add(k)
            if unknown:
                new.update(k for k, raw in zip(unknown, s.cf[unknown], strict=True)
                           if raw is None)
        self._db.write(batch)
        self._bytes_written += written
        self._puts += n
        if known is not None:
            if new:
                self._counts[s.name] = self._counts.get(s.name, 0) + len(new)
            if known:
                known.update(dict.fromkeys(keys, True))
                if len(known) > s.memo_max:
                    known.clear()

    def put(self, key: Key, value: Any, *, space: str = DEFAULT_SPACE,
            ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        """``StatePartition.put``: a blind put is buffered, the put of the key just read is
        written at once.

        Parameters
        ----------
        key, value, space, ttl_ms, now_ms
            As in ``StatePartition.put``.

        Raises
        ------
        StateValueError
            ``key`` is not bytes or str, or the codec refuses ``value``.
        OptionError
            ``space`` is not a valid space name, or ``ttl_ms`` is negative.
        StateTransactionError
            The partition is read-only, prepared, failed or closed.

        Runs on
        -------
        executor (the task that opened the partition)"""
        s = self._spaces.get(space)
        if s is None or not self._write_ok:
            s = self._space_for_write(space)
        k = key if type(key) is bytes else encode_key(key)
        if ttl_ms is not None:
            self._put_ttl(s, k, value, ttl_ms, now_ms)
            return
        stored = s.encode(value)
        if stored < _BARE:
            stored = _NO_TTL + stored
        batch = self._pending
        if batch is None:
            if k == s.last_read:
                # The write of a read-modify-write: presence is known, write it at once.
                s.cf.put(k, stored)
                if not s.last_present:
                    s.last_present = True
                    if s.known is not None:
                        self._counts[space] = self._counts.get(space, 0) + 1
                if s.known:
                    s.known.pop(k, None)
                self._puts += 1
                self._bytes_written += len(k) + len(stored)
                if self._log is not None:
                    self._log.put(space, k, stored)
                return
            batch = self._pending = rocksdict.WriteBatch(raw_mode=True)
            self._pending_space = s
        elif self._pending_space is not s:
            self._flush()
            batch = self._pending = rocksdict.WriteBatch(raw_mode=True)
            self._pending_space = s
        # A blind write: buffered, written (and its key counted) with the next batch.
        batch.put(k, stored, s.handle)
        if s.known is not None:
            self._pending_keys.append(k)
        written = self._pending_bytes = self._pending_bytes + len(k) + len(stored)
        if self._log is not None:
            self._log.put(space, k, stored)
        if written >= _BUFFER_BYTES or batch.len() >= _BUFFER_PUTS:
            self._flush()

    def put_many(self, items: Iterable[tuple[Key, Any]], *, space: str = DEFAULT_SPACE,
                 ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        """``StatePartition.put_many``: WriteBatches of ``CHUNK`` items; in changelog mode a
        chunk is logged once it is in the DB.

        Parameters
        ----------
        items, space, ttl_ms, now_ms
            As in ``StatePartition.put_many``.

        Raises
        ------
        StateValueError, OptionError, StateTransactionError
            As in ``put``; items of a chunk before a refused value are not written.

        Runs on
        -------
        executor (the task that opened the partition)"""
        s = self._space_for_write(space)
        self._flush()
        s.last_read = None
        if ttl_ms is not None:
            self._put_many_ttl(s, items, ttl_ms, now_ms)
            return
        # Hot path: one pass, straight into the WriteBatch, applied in chunks of CHUNK
        # (islice: no per-item chunk test). Exact counting looks a chunk's keys up just before
        # applying it; changelog mode also logs each put. Plain writes get the leanest loop.
        encode, handle = s.encode, s.handle
        exact, log = s.known is not None, self._log
        source = iter(items)
        while True:
            batch = rocksdict.WriteBatch(raw_mode=True)
            put = batch.put
            keys: list[bytes] = []
            written = 0
            if not exact and log is None:
                for key, value in islice(source, CHUNK):
                    k = key if type(key) is bytes else encode_key(key)
                    stored = encode(value)
                    if stored < _BARE:
                        stored = _NO_TTL + stored
                    put(k, stored, handle)
                    written += len(k) + len(stored)
            else:
                remember = keys.append
                # Logged only once the chunk is in the DB: an item that raises mid-chunk
                # leaves neither the DB nor the log with the chunk's earlier items.
                logged: list[tuple[bytes, bytes]] = []
                keep = None if log is None else logged.append
                for key, value in islice(source, CHUNK):
                    k = key if type(key) is bytes else encode_key(key)
                    stored = encode(value)
                    if stored < _BARE:
                        stored = _NO_TTL + stored
                    put(k, stored, handle)
                    written += len(k) + len(stored)
                    if keep is not None:
                        keep((k, stored))
                    if exact:
                        remember(k)
            n = batch.len()
            if n:
                self._apply(s, batch, keys, n, written)
                if log is not None:
                    for k, stored in logged:
                        log.put(s.name, k, stored)
            if n < CHUNK:
                return

    def delete(self, key: Key, *, space: str = DEFAULT_SPACE) -> None:
        """``StatePartition.delete`` (a key of a space that does not exist: nothing to do).

        Parameters
        ----------
        key, space
            As in ``StatePartition.delete``.

        Raises
        ------
        StateValueError
            ``key`` is not bytes or str.
        OptionError, StateTransactionError
            As in ``put``.

        Runs on
        -------
        executor (the task that opened the partition)"""
        s = self._spaces.get(space)
        if s is None or not self._write_ok:
            self._writable()
            s = self._space(space)
            if s is None:
                return
        k = key if type(key) is bytes else encode_key(key)
        if self._pending is not None:
            self._flush()
        known = s.known
        if self._log is not None:
            self._log.delete(space, k)  # a delete cannot fail for a valid key
        if known is None:
            s.cf.delete(k)
        else:
            present = s.last_present if k == s.last_read else known.get(k)
            if present is None:
                present = s.cf.get(k) is not None
            s.cf.delete(k)
            if present:
                self._counts[space] = self._counts.get(space, 0) - 1
            if len(known) >= s.memo_max:
                known.clear()
            known[k] = False
        s.last_read, s.last_present = k, False
        self._deletes += 1
