"""Per-key TTL in RocksDB: puts with an expiry and ``expire``.

A value with an expiry is stored framed (``orderedstream.statestore.ttl``) and gets an entry
in the ``__ttl__`` family, keyed by expiry first, so ``expire`` scans only the expired part of
that index. An entry is stale when its key was overwritten or deleted since (the value's own
expiry differs): ``expire`` drops it without touching the key, so a put never reads the old
value to find its index entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast

import rocksdict

from orderedstream.core.errors import OptionError
from orderedstream.statestore import ttl as ttl_mod
from orderedstream.statestore.base import Key
from orderedstream.statestore.rocksdb.db import TTL_CF, RawFamily, Space, encode_key
from orderedstream.statestore.rocksdb.writes import CHUNK, Writes


class Expiry(Writes):
    """TTL writes (``put``/``put_many`` with ``ttl_ms``) and ``expire``."""

    def _frame(self, s: Space, value: Any, ttl_ms: int, now_ms: int | None) -> tuple[bytes, int]:
        """The stored bytes of ``value`` with its expiry, and that expiry (ms)."""
        if ttl_ms < 0:
            raise OptionError(f"ttl_ms={ttl_ms}: must be >= 0 milliseconds (or None)")
        expires = (ttl_mod.now_ms() if now_ms is None else now_ms) + ttl_ms
        return ttl_mod.frame(s.encode(value), expires), expires

    def _ttl_space(self) -> Space:
        """The expiry index's space, created by the first TTL write."""
        return self._spaces.get(TTL_CF) or self._space_for_write(TTL_CF)

    def _put_ttl(self, s: Space, k: bytes, value: Any, ttl_ms: int,
                 now_ms: int | None) -> None:
        """A put with an expiry: the value and its expiry-index entry, written at once."""
        self._flush()
        stored, expires = self._frame(s, value, ttl_ms, now_ms)
        s.last_read = None
        known = s.known
        if known is None:
            s.cf.put(k, stored)
        else:
            present = known.get(k)
            if present is None:
                present = s.cf.get(k) is not None
            s.cf.put(k, stored)
            if not present:
                self._bump(s.name, 1)
            if len(known) >= s.memo_max:
                known.clear()
            known[k] = True
        ttl_s = self._ttl_space()
        entry = ttl_mod.index_key(expires, s.name, k)
        ttl_s.cf.put(entry, b"")
        if self._log is not None:
            self._log.put(s.name, k, stored)
            self._log.put(TTL_CF, entry, b"")
        self._puts += 1
        self._bytes_written += len(k) + len(stored)

    def _put_many_ttl(self, s: Space, items: Iterable[tuple[Key, Any]], ttl_ms: int,
                      now_ms: int | None) -> None:
        ttl_s = self._ttl_space()
        chunk: list[tuple[bytes, Any]] = []
        for key, value in items:
            chunk.append((encode_key(key), value))
            if len(chunk) >= CHUNK:
                self._ttl_chunk(s, ttl_s, chunk, ttl_ms, now_ms)
                chunk = []
        if chunk:
            self._ttl_chunk(s, ttl_s, chunk, ttl_ms, now_ms)

    def _ttl_chunk(self, s: Space, ttl_s: Space, chunk: list[tuple[bytes, Any]],
                   ttl_ms: int, now_ms: int | None) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        written = 0
        logged: list[tuple[bytes, bytes, bytes]] = []
        for k, value in chunk:
            stored, expires = self._frame(s, value, ttl_ms, now_ms)
            entry = ttl_mod.index_key(expires, s.name, k)
            batch.put(k, stored, s.handle)
            batch.put(entry, b"", ttl_s.handle)
            if self._log is not None:
                logged.append((k, stored, entry))
            written += len(k) + len(stored)
        keys = [k for k, _ in chunk] if s.known is not None else []
        self._apply(s, batch, keys, len(chunk), written)
        if self._log is not None:  # logged once in the DB, like put_many
            for k, stored, entry in logged:
                self._log.put(s.name, k, stored)
                self._log.put(TTL_CF, entry, b"")

    def expire(self, now_ms: int | None = None, *,
               limit: int | None = None) -> Iterator[tuple[str, bytes, Any]]:
        """``StatePartition.expire``: scans ``__ttl__`` up to ``now_ms``; stale index entries
        (the key was overwritten or deleted since) are dropped without yielding.

        Parameters
        ----------
        now_ms, limit
            As in ``StatePartition.expire``.

        Raises
        ------
        StateTransactionError
            The partition is read-only, prepared, failed or closed (also when resumed after
            ``close``).

        Runs on
        -------
        executor (the task that opened the partition)"""
        self._writable()
        ttl_s = self._space(TTL_CF)
        if ttl_s is None:
            return
        upper = ttl_mod.index_upper_bound(ttl_mod.now_ms() if now_ms is None else now_ms)
        done = 0
        # only the scan crosses a yield (``db.Scan``: close cuts it off), no space
        scan = self._scan(ttl_s.cf)
        del ttl_s
        for entry, _ in scan:
            if not self._write_ok:  # resumed after a commit (marked dirty again, logged), or
                self._writable()  # after prepare_commit or close: refused
            if entry >= upper or (limit is not None and done >= limit):
                break
            expires, space, key = ttl_mod.parse_index_key(entry)
            if self._pending is not None:  # puts made by the caller between two steps
                self._flush()
            cast(RawFamily, scan.cf).delete(entry)  # set: the scan is not released
            if self._log is not None:
                self._log.delete(TTL_CF, entry)
            s = self._space(space) if space in self._cfs else None
            if s is None:
                continue  # stale entry: the key's space is gone
            raw = s.cf.get(key)
            if raw is None or ttl_mod.expiry_of(raw) != expires:
                continue  # stale entry: the key was overwritten or deleted since
            s.cf.delete(key)
            if self._log is not None:
                self._log.delete(space, key)
            if s.known is not None:
                s.known.pop(key, None)
            s.last_read = None
            self._deletes += 1
            self._bump(space, -1)
            done += 1
            value = s.decode(ttl_mod.unframe(raw)[0])
            s = None
            yield space, key, value
