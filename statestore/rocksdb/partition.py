"""``RocksDBStatePartition``: one partition's state in a local RocksDB (rocksdict, raw bytes).

The class is put together from one part per job, each in its own module, and adds the reads
and the partition's end:

- ``db``: the DB, its spaces (column families) and status checks, the state all parts share;
- ``writes``: ``put``, ``put_many``, ``delete``, the blind-put buffer and exact key counts;
- ``expiry``: writes with a TTL and ``expire``;
- ``committer``: ``prepare_commit`` and ``commit`` (checkpoint or changelog uploads);
- here: ``get``, ``get_for_update``, ``contains``, ``multi_get``, scans, ``num_keys``,
  ``close``.

The parts are base classes of one class, not objects it delegates to: the hot path (``get``,
``put``, ``put_many``, ``multi_get``, ``get_for_update``) stays one method call on the
partition, with nothing in between it and rocksdict.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import is_not
from typing import Any

from orderedstream.core.tuning import process_tuning
from orderedstream.statestore import ttl as ttl_mod
from orderedstream.statestore.base import DEFAULT_SPACE, Key
from orderedstream.statestore.rocksdb import keepopen
from orderedstream.statestore.rocksdb.committer import Committer
from orderedstream.statestore.rocksdb.db import (
    Status,
    encode_key,
    options_fingerprint,
    prefix_end,
)
from orderedstream.statestore.rocksdb.expiry import Expiry

_BARE = ttl_mod.BARE


def _payload(raw: bytes) -> bytes:
    """The codec payload of stored bytes (``orderedstream.statestore.ttl`` frame, if any,
    removed)."""
    return raw if raw >= _BARE else ttl_mod.unframe(raw)[0]


class RocksDBStatePartition(Committer, Expiry):
    """See ``orderedstream.statestore.base.StatePartition``. Built by
    ``orderedstream.statestore.rocksdb.store.RocksDBStateStore``."""

    # ---- reads ---------------------------------------------------------------------------
    def get(self, key: Key, default: Any = None, *, space: str = DEFAULT_SPACE) -> Any:
        """``StatePartition.get``; remembers the key's presence for the ``put`` that may follow.

        Parameters
        ----------
        key, default, space
            As in ``StatePartition.get``.

        Raises
        ------
        StateTransactionError
            The partition is closed.
        OptionError
            ``space`` is not a valid space name.
        StateValueError
            A key is not bytes or str.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        s = self._spaces.get(space)
        if s is None:
            s = self._space(space)
            if s is None:
                return default
        k = key if type(key) is bytes else encode_key(key)
        if self._pending is not None:
            self._flush()
        raw = s.cf.get(k)
        s.last_read = k
        if raw is None:
            s.last_present = False
            return default
        s.last_present = True
        return s.decode(raw if raw >= _BARE else ttl_mod.unframe(raw)[0])

    def get_for_update(self, key: Key, default: Any = None, *,
                       space: str = DEFAULT_SPACE) -> Any:
        """``get``, remembering (in a bounded memo) whether the key holds a value, so a later
        ``put_many`` or ``delete`` of it keeps exact key counts without reading it again.
        For callers that read many keys, then write them back in one batch.

        Parameters
        ----------
        key, default, space
            As in ``StatePartition.get``.

        Raises
        ------
        StateTransactionError
            The partition is closed.
        OptionError
            ``space`` is not a valid space name.
        StateValueError
            A key is not bytes or str.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        value = self.get(key, default, space=space)
        s = self._spaces.get(space)
        if s is not None and s.known is not None and s.last_read is not None:
            known = s.known
            if len(known) >= s.memo_max:
                known.clear()
            known[s.last_read] = s.last_present
        return value

    def contains(self, key: Key, *, space: str = DEFAULT_SPACE) -> bool:
        """``StatePartition.contains``; the answer goes in the space's presence memo.

        Parameters
        ----------
        key, space
            As in ``StatePartition.contains``.

        Raises
        ------
        StateTransactionError
            The partition is closed.
        OptionError
            ``space`` is not a valid space name.
        StateValueError
            A key is not bytes or str.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        s = self._spaces.get(space) or self._space(space)
        if s is None:
            return False
        k = encode_key(key)
        self._flush()
        present = s.cf.get(k) is not None
        if s.known is not None:
            if len(s.known) >= s.memo_max:
                s.known.clear()
            s.known[k] = present
        return present

    def multi_get(self, keys: Sequence[Key], default: Any = None, *,
                  space: str = DEFAULT_SPACE) -> list[Any]:
        """``StatePartition.multi_get``: one RocksDB MultiGet.

        Parameters
        ----------
        keys, default, space
            As in ``StatePartition.multi_get``.

        Raises
        ------
        StateTransactionError
            The partition is closed.
        OptionError
            ``space`` is not a valid space name.
        StateValueError
            A key is not bytes or str.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        s = self._spaces.get(space) or self._space(space)
        if s is None:
            return [default] * len(keys)
        encoded = [k if type(k) is bytes else encode_key(k) for k in keys]
        self._flush()
        raws = s.cf[encoded]
        known = s.known
        if known is not None and len(encoded) <= s.memo_max:
            if len(known) + len(encoded) > s.memo_max:
                known.clear()
            known.update(zip(encoded, map(is_not, raws, repeat(None))))  # C loops only
        decode = s.decode
        return [default if r is None else decode(r if r >= _BARE else ttl_mod.unframe(r)[0])
                for r in raws]

    def range(self, start: Key | None = None, end: Key | None = None, *,
              space: str = DEFAULT_SPACE, reverse: bool = False) -> Iterator[tuple[bytes, Any]]:
        """``StatePartition.range``, streamed from one RocksDB iterator (``close`` ends it).

        Parameters
        ----------
        start, end, space, reverse
            As in ``StatePartition.range``.

        Raises
        ------
        StateTransactionError
            The partition is closed.
        OptionError
            ``space`` is not a valid space name.
        StateValueError
            A key is not bytes or str.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        s = self._space(space)
        if s is None:
            return
        lo = None if start is None else encode_key(start)
        hi = None if end is None else encode_key(end)
        decode = s.decode
        self._flush()
        # only the scan crosses a yield (``Scan``: close cuts it off), not the space
        scan = self._scan(s.cf, backwards=reverse, from_key=hi if reverse else lo)
        del s
        if not reverse:
            for key, raw in scan:
                if hi is not None and key >= hi:
                    break
                yield key, decode(_payload(raw))
        else:
            for key, raw in scan:
                if hi is not None and key >= hi:
                    continue
                if lo is not None and key < lo:
                    break
                yield key, decode(_payload(raw))

    def prefix(self, prefix: Key, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, Any]]:
        """``StatePartition.prefix``: a ``range`` up to ``db.prefix_end(prefix)``.

        Parameters
        ----------
        prefix, space
            As in ``StatePartition.prefix``.

        Raises
        ------
        StateTransactionError
            The partition is closed.
        OptionError
            ``space`` is not a valid space name.
        StateValueError
            A key is not bytes or str.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        low = encode_key(prefix)
        return self.range(low, prefix_end(low), space=space)

    def raw_items(self, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, bytes]]:
        """``(key, stored bytes)`` in key order: TTL frame included (see
        ``orderedstream.statestore.ttl``).

        Parameters
        ----------
        space
            The space to scan.

        Raises
        ------
        StateTransactionError
            The partition is closed.
        OptionError
            ``space`` is not a valid space name.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        s = self._space(space)
        if s is not None:
            self._flush()
            scan = self._scan(s.cf)
            del s
            yield from scan

    def decode(self, space: str, payload: bytes) -> Any:
        """Decode a value payload of ``space`` with that space's codec.

        Parameters
        ----------
        space
            The space the value belongs to.
        payload
            The stored bytes without their TTL frame.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        return self._codec(space).decode(payload)

    def spaces(self) -> list[str]:
        """``StatePartition.spaces``: ``default``, then the other user spaces by name.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        return ["default"] + sorted(n for n in self._cfs if n != "default"
                                    and not n.startswith("__"))

    def num_keys(self, *, space: str | None = None) -> int:
        """``StatePartition.num_keys``: the partition's counts, or RocksDB's estimate.

        Parameters
        ----------
        space
            As in ``StatePartition.num_keys``.

        Raises
        ------
        StateTransactionError
            The partition is closed.

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        self._readable()
        self._flush()
        names = self.spaces() if space is None else [space]
        if self._exact:
            return sum(self._counts.get(n, 0) for n in names)
        return sum(self._cfs[n].property_int_value("rocksdb.estimate-num-keys") or 0
                   for n in names if n in self._cfs)

    # ---- end -----------------------------------------------------------------------------
    def close(self) -> None:
        """``StatePartition.close``: an uncommitted write log and buffered puts are dropped; a
        clean local copy's DB may be kept open for the next open (``keepopen``).

        Runs on
        -------
        both (the task that opened it; the driver for read-only views)"""
        if self._status is Status.CLOSED:
            return
        kept = self._keepable()
        self._status = Status.CLOSED
        self._release_scans()  # a suspended scan must not hold the DB (``db.Scan``)
        self._pending = self._pending_space = None  # never committed: dropped like the log
        if self._log is not None:  # writes never committed: their log is worthless
            self._log.discard()
            self._log = None
        self._write_ok = False
        self._spaces.clear()
        self._cfs.clear()
        self._handles.clear()
        try:
            if kept is None:
                self._db.close()
            elif self._copy is None or not keepopen.keep(self._copy.dir, kept,
                                                          self._options.keep_open):
                kept.close()  # drops its families first: the DB is closed once none is left
        finally:
            if self._copy is not None:
                self._copy.release()
            if self._temp_dir is not None:
                shutil.rmtree(self._temp_dir, ignore_errors=True)

    def _keepable(self) -> keepopen.Kept | None:
        """What ``close`` may keep open: a writable partition whose local copy is clean and
        holds this DB (committed or prepared, no write since), else None. Only with
        ``ORDEREDSTREAM_PROCESS_TUNING=1``: keeping serves other processes from a thread."""
        copy = self._copy
        if (copy is None or self._options.keep_open == 0 or not process_tuning()
                or copy.state.dirty
                or self._status not in (Status.OPEN, Status.PREPARED)
                or self._pending is not None
                or copy.state.db != os.path.basename(self._db_path)):
            return None
        return keepopen.Kept(db=self._db, families=dict(self._cfs), db_name=copy.state.db,
                             version=copy.state.version, manifest=copy.state.manifest,
                             fingerprint=options_fingerprint(self._options))

    def __repr__(self) -> str:
        return (f"RocksDBStatePartition({self._location.url!r}, partition={self.partition}, "
                f"version={self.base_version}, {self._status.value})")


__all__ = ["RocksDBStatePartition"]
