"""``RocksDBStatePartition``: one partition's state in a local RocksDB (rocksdict, raw bytes).

Spaces are column families (``default`` is RocksDB's default family); two internal families
hold key counts (``__meta__``) and the TTL expiry index (``__ttl__``). Writes go to the DB with
the WAL off: blind ``put``s through a small WriteBatch buffer (written, with the key-count
lookups as one MultiGet, before any read, delete, other write or commit), the write of a
read-modify-write and the other write paths at once. ``prepare_commit`` checkpoints the DB
(hard links), uploads only new SSTs (``orderedstream.statestore.snapshot``) and writes an
attempt-unique
candidate manifest. In changelog mode
(``StateStoreOptions.changelog``) every write is also appended to a per-version log, and
between full checkpoints a commit uploads only that log
(``orderedstream.statestore.rocksdb.changelog``).
"""

from __future__ import annotations

import enum
import logging
import os
import re
import shutil
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice, repeat
from operator import is_not
from typing import Any

import rocksdict

from orderedstream.core.errors import OptionError, StateTransactionError
from orderedstream.core.storage import create_exclusive
from orderedstream.statestore import ttl as ttl_mod
from orderedstream.statestore.base import (
    DEFAULT_SPACE,
    EMPTY_VERSION,
    Codec,
    CommitCandidate,
    CommitMetrics,
    Key,
    StatePartition,
)
from orderedstream.statestore.manifest import (
    FORMAT,
    FileEntry,
    Manifest,
    read_manifest,
    writer_identity,
)
from orderedstream.statestore.options import StateLocation, StateStoreOptions
from orderedstream.statestore.restore import cache_name
from orderedstream.statestore.rocksdb.changelog import ChangelogWriter
from orderedstream.statestore.rocksdb.localcopy import CopyState, LocalCopy
from orderedstream.statestore.rocksdb.options import make_options, write_options
from orderedstream.statestore.snapshot import UploadResult, sha256_file, transfer, upload_checkpoint

_log = logging.getLogger("statestore")

META_CF = "__meta__"
TTL_CF = "__ttl__"
_SPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
_I64 = struct.Struct(">q")
_CHUNK = 10_000
_NO_TTL = ttl_mod.NO_TTL
_BARE = ttl_mod.BARE


class Status(enum.Enum):
    OPEN = "open"
    PREPARED = "prepared"
    FAILED = "failed"
    CLOSED = "closed"


def encode_key(key: Key) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"state keys are bytes or str, got {type(key).__name__}")


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    data = bytearray(prefix)
    while data and data[-1] == 0xFF:
        data.pop()
    if not data:
        return None
    data[-1] += 1
    return bytes(data)


def open_rdict(path: str, options: StateStoreOptions, *, read_only: bool) -> rocksdict.Rdict:
    """Open (or create) the DB at ``path`` with all its column families."""
    o = make_options(options)
    families = ["default"]
    if os.path.exists(os.path.join(path, "CURRENT")):
        families = rocksdict.Rdict.list_cf(path, o)
    cfs = {name: make_options(options) for name in families if name != "default"}
    if read_only:
        return rocksdict.Rdict(path, o, column_families=cfs,
                               access_type=rocksdict.AccessType.read_only())
    db = rocksdict.Rdict(path, o, column_families=cfs)
    db.set_write_options(write_options())
    return db


class _Space:
    """What the hot path needs of one space, found with one dict lookup: the column family,
    its WriteBatch handle, the codec's bound methods, and what is known of keys' presence.

    ``last_read``/``last_present``: the key of the last ``get`` and whether it held a value,
    so the ``put`` of a read-modify-write is written at once and counted without a second
    read. Write paths that could change that key's presence reset it.

    ``known`` (exact key counting only, else None) maps keys read by ``multi_get``,
    ``contains`` and ``get_for_update``, or written, to whether they hold a value, so a later
    ``put_many`` or ``delete`` of them counts keys without reading them again. Every write
    path keeps it true; it is cleared when it reaches ``_MEMO_MAX`` entries (bounded memory).
    """

    __slots__ = ("cf", "decode", "encode", "handle", "known", "last_present", "last_read",
                 "name")

    def __init__(self, name: str, cf: rocksdict.Rdict, handle: Any, codec: Codec,
                 exact: bool) -> None:
        self.name = name
        self.cf = cf
        self.handle = handle
        self.encode = codec.encode
        self.decode = codec.decode
        self.known: dict[bytes, bool] | None = {} if exact else None
        self.last_read: bytes | None = None
        self.last_present = False


_MEMO_MAX = 1 << 14
_BUFFER_PUTS = 1_000
_BUFFER_BYTES = 4 << 20


def _payload(raw: bytes) -> bytes:
    """The codec payload of stored bytes (``orderedstream.statestore.ttl`` frame, if any,
    removed)."""
    return raw if raw >= _BARE else ttl_mod.unframe(raw)[0]


class RocksDBStatePartition(StatePartition):
    """See ``orderedstream.statestore.base.StatePartition``. Built by
    ``orderedstream.statestore.store.StateStore``."""

    def __init__(self, *, location: StateLocation, fs: Any, root: str, partition: int,
                 version: int, options: StateStoreOptions, db_path: str,
                 copy: LocalCopy | None, publish: Callable[[CommitCandidate], None] | None,
                 codecs: Mapping[str, Codec] | None = None, temp_dir: str | None = None) -> None:
        self.partition = partition
        self.base_version = version
        self._location = location
        self._fs = fs
        self._root = root
        self._options = options
        self._exact = options.exact_key_count
        self._copy = copy
        self._publish = publish
        self._codecs = dict(codecs or {})
        self._temp_dir = temp_dir
        self._read_only = copy is None
        self._db = open_rdict(db_path, options, read_only=self._read_only)
        self._cfs: dict[str, rocksdict.Rdict] = {"default": self._db}
        self._handles: dict[str, Any] = {}
        self._spaces: dict[str, _Space] = {}
        for name in rocksdict.Rdict.list_cf(db_path, make_options(options)):
            if name != "default":
                self._cfs[name] = self._db.get_column_family(name)
        self._counts: dict[str, int] = self._load_counts()
        self._status = Status.OPEN
        self._write_ok = False
        """True once writes were checked allowed and the local copy marked dirty; reset by
        ``prepare_commit``/``close`` so the next write checks (and marks) again."""
        self._puts = self._deletes = self._bytes_written = 0
        self._ttl_entries = 0
        self._changelog_mode = options.changelog and not self._read_only
        self._log: ChangelogWriter | None = None
        """This version's write log (changelog mode; created by the first write)."""
        self._base_files: tuple[FileEntry, ...] | None = None
        """Files of the checkpoint the local copy's changelogs apply to (read lazily)."""
        self._pending: rocksdict.WriteBatch | None = None
        """Blind ``put``s not yet in the DB (one space, at most ``_BUFFER_PUTS`` puts or
        ``_BUFFER_BYTES``): written as one batch, with their key-count lookups done as one
        MultiGet, before any read, delete, other write path or commit (``_flush``)."""
        self._pending_space: _Space | None = None
        self._pending_keys: list[bytes] = []
        self._pending_bytes = 0

    # ---- helpers -------------------------------------------------------------------------
    def _load_counts(self) -> dict[str, int]:
        meta = self._cfs.get(META_CF)
        if meta is None:
            return {}
        counts = {}
        for key, value in meta.items(from_key=b"count/"):
            if not key.startswith(b"count/"):
                break
            counts[key[6:].decode()] = _I64.unpack(value)[0]
        return counts

    def _codec(self, space: str) -> Codec:
        codec = self._codecs.get(space)
        return codec if codec is not None else self._options.codec_for(space)

    def _cf(self, space: str, *, create: bool = False) -> rocksdict.Rdict | None:
        cf = self._cfs.get(space)
        if cf is None:
            if space.startswith("__") and space not in (META_CF, TTL_CF) or (
                    not space.startswith("__") and not _SPACE_RE.match(space)):
                raise OptionError(f"state space name {space!r} is invalid: use 1-100 of "
                                  "A-Z a-z 0-9 _ . - starting with a letter or digit")
            if not create:
                return None
            self._writable()
            cf = self._db.create_column_family(space, make_options(self._options))
            self._cfs[space] = cf
            if self._log is not None:
                self._log.space_id(space)  # replay recreates the family even if left empty
        return cf

    def _handle(self, space: str) -> Any:
        handle = self._handles.get(space)
        if handle is None:
            handle = self._handles[space] = self._db.get_column_family_handle(space)
        return handle

    def _space(self, space: str, *, create: bool = False) -> _Space | None:
        """The slow path of every call: checks, creates the family if asked, caches it."""
        self._readable()
        s = self._spaces.get(space)
        if s is None:
            cf = self._cf(space, create=create)
            if cf is None:
                return None
            s = _Space(space, cf, self._handle(space), self._codec(space), self._exact)
            self._spaces[space] = s
        return s

    def _space_for_write(self, space: str, *, create: bool = True) -> _Space | None:
        self._writable()
        return self._space(space, create=create)

    def _writable(self) -> None:
        if self._read_only:
            raise StateTransactionError(
                f"state partition {self.partition} of {self._location.url} was opened "
                f"read-only at version {self.base_version}; open it with StateStore.open to "
                "write")
        if self._status is not Status.OPEN:
            raise StateTransactionError(
                f"state partition {self.partition} of {self._location.url} is "
                f"{self._status.value}; writes are accepted only before prepare_commit (reopen "
                "the partition at the committed version to continue)")
        copy = self._copy
        if copy is not None and not copy.state.dirty:
            copy.state.dirty = True
            copy.save()
        if self._changelog_mode and self._log is None:
            assert copy is not None
            self._log = self._new_log(copy)
        self._write_ok = True

    @staticmethod
    def _new_log(copy: LocalCopy) -> ChangelogWriter:
        """A write log for the version being written, in the local copy's directory (logs of
        versions that never commit are removed by ``LocalCopy.remove_stale``)."""
        return ChangelogWriter(os.path.join(copy.dir, f"changelog-{uuid.uuid4().hex}.log"))

    def _readable(self) -> None:
        if self._status is Status.CLOSED:
            raise StateTransactionError(
                f"state partition {self.partition} of {self._location.url} is closed")

    def _bump(self, space: str, delta: int) -> None:
        self._counts[space] = self._counts.get(space, 0) + delta

    def _flush(self) -> None:
        """Write the buffered puts (counting the keys they add), so reads see them."""
        batch, s = self._pending, self._pending_space
        if batch is None:
            return
        keys, written = self._pending_keys, self._pending_bytes
        self._pending, self._pending_space, self._pending_keys = None, None, []
        self._pending_bytes = 0
        assert s is not None
        s.last_read = None  # the batch may hold that key: its presence is no longer known
        self._apply(s, batch, keys, batch.len(), written)  # keys: exact counting only

    # ---- reads ---------------------------------------------------------------------------
    def get(self, key: Key, default: Any = None, *, space: str = DEFAULT_SPACE) -> Any:
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
        For callers that read many keys, then write them back in one batch."""
        value = self.get(key, default, space=space)
        s = self._spaces.get(space)
        if s is not None and s.known is not None:
            known = s.known
            if len(known) >= _MEMO_MAX:
                known.clear()
            known[s.last_read] = s.last_present  # type: ignore[index]
        return value

    def contains(self, key: Key, *, space: str = DEFAULT_SPACE) -> bool:
        s = self._spaces.get(space) or self._space(space)
        if s is None:
            return False
        k = encode_key(key)
        self._flush()
        present = s.cf.get(k) is not None
        if s.known is not None:
            if len(s.known) >= _MEMO_MAX:
                s.known.clear()
            s.known[k] = present
        return present

    def multi_get(self, keys: Sequence[Key], default: Any = None, *,
                  space: str = DEFAULT_SPACE) -> list[Any]:
        s = self._spaces.get(space) or self._space(space)
        if s is None:
            return [default] * len(keys)
        encoded = [k if type(k) is bytes else encode_key(k) for k in keys]
        self._flush()
        raws = s.cf[encoded]
        known = s.known
        if known is not None and len(encoded) <= _MEMO_MAX:
            if len(known) + len(encoded) > _MEMO_MAX:
                known.clear()
            known.update(zip(encoded, map(is_not, raws, repeat(None))))  # C loops only
        decode = s.decode
        return [default if r is None else decode(r if r >= _BARE else ttl_mod.unframe(r)[0])
                for r in raws]

    def range(self, start: Key | None = None, end: Key | None = None, *,
              space: str = DEFAULT_SPACE, reverse: bool = False) -> Iterator[tuple[bytes, Any]]:
        s = self._space(space)
        if s is None:
            return
        lo = None if start is None else encode_key(start)
        hi = None if end is None else encode_key(end)
        decode = s.decode
        self._flush()
        if not reverse:
            for key, raw in s.cf.items(from_key=lo):
                if hi is not None and key >= hi:
                    break
                yield key, decode(_payload(raw))
        else:
            for key, raw in s.cf.items(backwards=True, from_key=hi):
                if hi is not None and key >= hi:
                    continue
                if lo is not None and key < lo:
                    break
                yield key, decode(_payload(raw))

    def prefix(self, prefix: Key, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, Any]]:
        low = encode_key(prefix)
        return self.range(low, prefix_end(low), space=space)

    def raw_items(self, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, bytes]]:
        """``(key, stored bytes)`` in key order: TTL frame included (see
        ``orderedstream.statestore.ttl``)."""
        s = self._space(space)
        if s is not None:
            self._flush()
            yield from s.cf.items()

    def decode(self, space: str, payload: bytes) -> Any:
        """Decode a value payload of ``space`` with that space's codec."""
        return self._codec(space).decode(payload)

    def spaces(self) -> list[str]:
        return ["default"] + sorted(n for n in self._cfs if n != "default"
                                    and not n.startswith("__"))

    def num_keys(self, *, space: str | None = None) -> int:
        self._readable()
        self._flush()
        names = self.spaces() if space is None else [space]
        if self._exact:
            return sum(self._counts.get(n, 0) for n in names)
        return sum(self._cfs[n].property_int_value("rocksdb.estimate-num-keys") or 0
                   for n in names if n in self._cfs)

    # ---- writes --------------------------------------------------------------------------
    def _frame(self, s: _Space, value: Any, ttl_ms: int | None,
               now_ms: int | None) -> tuple[bytes, int | None]:
        if ttl_ms is not None and ttl_ms < 0:
            raise OptionError(f"ttl_ms={ttl_ms}: must be >= 0 milliseconds (or None)")
        expires = None
        if ttl_ms is not None:
            expires = (ttl_mod.now_ms() if now_ms is None else now_ms) + ttl_ms
        return ttl_mod.frame(s.encode(value), expires), expires

    def put(self, key: Key, value: Any, *, space: str = DEFAULT_SPACE,
            ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        s = self._spaces.get(space)
        if s is None or not self._write_ok:
            s = self._space_for_write(space)
            assert s is not None
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

    def _put_ttl(self, s: _Space, k: bytes, value: Any, ttl_ms: int,
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
            if len(known) >= _MEMO_MAX:
                known.clear()
            known[k] = True
        ttl_s = self._space(TTL_CF, create=True)
        assert ttl_s is not None and expires is not None
        entry = ttl_mod.index_key(expires, s.name, k)
        ttl_s.cf.put(entry, b"")
        if self._log is not None:
            self._log.put(s.name, k, stored)
            self._log.put(TTL_CF, entry, b"")
        self._puts += 1
        self._bytes_written += len(k) + len(stored)

    def put_many(self, items: Iterable[tuple[Key, Any]], *, space: str = DEFAULT_SPACE,
                 ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        s = self._space_for_write(space)
        assert s is not None
        self._flush()
        s.last_read = None
        if ttl_ms is not None:
            self._put_many_ttl(s, items, ttl_ms, now_ms)
            return
        # Hot path: one pass, straight into the WriteBatch, applied in chunks of _CHUNK
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
                for key, value in islice(source, _CHUNK):
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
                for key, value in islice(source, _CHUNK):
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
            if n < _CHUNK:
                return

    def _put_many_ttl(self, s: _Space, items: Iterable[tuple[Key, Any]], ttl_ms: int,
                      now_ms: int | None) -> None:
        ttl_s = self._space(TTL_CF, create=True)
        assert ttl_s is not None
        chunk: list[tuple[bytes, Any]] = []
        for key, value in items:
            chunk.append((encode_key(key), value))
            if len(chunk) >= _CHUNK:
                self._ttl_chunk(s, ttl_s, chunk, ttl_ms, now_ms)
                chunk = []
        if chunk:
            self._ttl_chunk(s, ttl_s, chunk, ttl_ms, now_ms)

    def _ttl_chunk(self, s: _Space, ttl_s: _Space, chunk: list[tuple[bytes, Any]],
                   ttl_ms: int, now_ms: int | None) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        written = 0
        logged: list[tuple[bytes, bytes, bytes]] = []
        for k, value in chunk:
            stored, expires = self._frame(s, value, ttl_ms, now_ms)
            entry = ttl_mod.index_key(expires, s.name, k)  # type: ignore[arg-type]
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

    def _apply(self, s: _Space, batch: rocksdict.WriteBatch, keys: list[bytes], n: int,
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
                if len(known) > _MEMO_MAX:
                    known.clear()

    def delete(self, key: Key, *, space: str = DEFAULT_SPACE) -> None:
        s = self._spaces.get(space)
        if s is None or not self._write_ok:
            s = self._space_for_write(space, create=False)
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
            if len(known) >= _MEMO_MAX:
                known.clear()
            known[k] = False
        s.last_read, s.last_present = k, False
        self._deletes += 1

    def expire(self, now_ms: int | None = None, *,
               limit: int | None = None) -> Iterator[tuple[str, bytes, Any]]:
        self._writable()
        ttl_s = self._space(TTL_CF)
        if ttl_s is None:
            return
        upper = ttl_mod.index_upper_bound(ttl_mod.now_ms() if now_ms is None else now_ms)
        done = 0
        for entry, _ in ttl_s.cf.items():
            if entry >= upper or (limit is not None and done >= limit):
                break
            expires, space, key = ttl_mod.parse_index_key(entry)
            if self._pending is not None:  # puts made by the caller between two steps
                self._flush()
            ttl_s.cf.delete(entry)
            if self._log is not None:
                self._log.delete(TTL_CF, entry)
            s = self._space(space) if space in self._cfs else None
            raw = None if s is None else s.cf.get(key)
            if raw is None or ttl_mod.expiry_of(raw) != expires:
                continue  # stale entry: the key was overwritten or deleted since
            assert s is not None
            s.cf.delete(key)
            if self._log is not None:
                self._log.delete(space, key)
            if s.known is not None:
                s.known.pop(key, None)
            s.last_read = None
            self._deletes += 1
            self._bump(space, -1)
            done += 1
            yield space, key, s.decode(ttl_mod.unframe(raw)[0])

    # ---- versions ------------------------------------------------------------------------
    def prepare_commit(self, version: int, *, writer: str | None = None) -> CommitCandidate:
        started = time.perf_counter()
        copy = self._copy
        if copy is None:
            self._writable()  # raises: read-only
            raise AssertionError("unreachable")
        if self._status is not Status.OPEN:
            raise StateTransactionError(
                f"cannot prepare state partition {self.partition} of {self._location.url}: "
                f"it is {self._status.value}")
        if not isinstance(version, int) or version <= self.base_version:
            raise StateTransactionError(
                f"state version {version!r} for partition {self.partition} must be an int "
                f"greater than the version it was opened at ({self.base_version})")
        self._write_ok = False
        try:
            self._flush()
            return self._prepare(copy, version, writer, started)
        except BaseException:
            self._status = Status.FAILED
            raise
        finally:
            self._write_ok = False  # the next write checks the status and marks dirty again

    def _prepare(self, copy: LocalCopy, version: int, writer: str | None,
                 started: float) -> CommitCandidate:
        attempt = uuid.uuid4().hex
        if self._options.exact_key_count:
            meta = self._cf(META_CF, create=True)
            assert meta is not None
            for space, count in self._counts.items():
                key, value = b"count/" + space.encode(), _I64.pack(count)
                meta.put(key, value)
                if self._log is not None:
                    self._log.put(META_CF, key, value)
        pdir = StateLocation.partition_dir(self.partition)
        # Changelog mode: a lineage starts with a checkpoint, then takes one every
        # snapshot_interval versions (a restore replays at most snapshot_interval - 1 logs).
        full = (not self._changelog_mode or copy.state.manifest is None
                or len(copy.state.changelog) + 1 >= self._options.snapshot_interval)
        if full:
            if self._log is not None:
                self._log.discard()
                self._log = None
            result, files, chain, ckpt_s, cleanup = self._upload_checkpoint(copy, pdir,
                                                                            version, attempt)
        else:
            result, files, chain, ckpt_s, cleanup = self._upload_changelog(copy, pdir,
                                                                           version, attempt)
        try:
            uploaded = time.perf_counter()
            manifest_rel = f"{pdir}/manifests/{version}-{attempt}.json"
            num_keys = self.num_keys()
            manifest = Manifest(
                partition=self.partition, version=version, parent_version=self.base_version,
                parent_manifest=copy.state.manifest, files=files, changelog=chain,
                format=FORMAT,
                num_keys=num_keys,
                key_counts={s: self._counts.get(s, 0) for s in self.spaces()},
                spaces={s: self._codec(s).spec() for s in self.spaces()},
                writer=writer_identity(writer, attempt), created_at=time.time())
            if not create_exclusive(self._fs, f"{self._root}/{manifest_rel}",
                                    manifest.to_json()):
                raise StateTransactionError(f"manifest {manifest_rel} already exists")
            old = [*copy.state.files.values(), *copy.state.changelog]
            new_files = {e.name: e for e in manifest.sst_entries()}
            for remote, local in result.new_files.items():
                target = os.path.join(copy.cache_dir, remote.rsplit("/", 1)[-1])
                if not os.path.exists(target):
                    os.link(local, target)
            copy.state = CopyState(version=version, manifest=manifest_rel, dirty=False,
                                   db=copy.state.db, files=new_files, changelog=list(chain))
            copy.save()
            self._base_files = files
            keep = {cache_name(e) for e in [*old, *manifest.remote_entries()]}
        finally:
            cleanup()
        copy.remove_stale(keep)
        self._status = Status.PREPARED
        metrics = CommitMetrics(
            partition=self.partition, version=version, num_keys=num_keys, puts=self._puts,
            deletes=self._deletes, bytes_written=self._bytes_written,
            files_total=len(files) + len(chain), files_uploaded=result.files_uploaded,
            files_reused=result.files_reused, bytes_uploaded=result.bytes_uploaded,
            bytes_total=manifest.total_bytes, checkpoint_seconds=ckpt_s - started,
            upload_seconds=uploaded - ckpt_s,
            commit_seconds=time.perf_counter() - started, manifest_path=manifest_rel,
            changelog=not full)
        _log.info("state candidate %s", metrics.to_dict())
        return CommitCandidate(location_url=self._location.url, partition=self.partition,
                               version=version, manifest_path=manifest_rel,
                               writer=writer or attempt, metrics=metrics)

    def _upload_checkpoint(self, copy: LocalCopy, pdir: str, version: int, attempt: str,
                           ) -> tuple[UploadResult, tuple[FileEntry, ...], tuple[FileEntry, ...],
                                      float, Callable[[], None]]:
        """A full snapshot: checkpoint (flushes the memtables), upload the SSTs not uploaded
        before. Returns the upload, the manifest's files and (empty) changelog, the time the
        checkpoint was done and how to clean up the checkpoint dir."""
        ckpt = os.path.join(copy.dir, f"ckpt-{attempt}")
        rocksdict.Checkpoint(self._db).create_checkpoint(ckpt)
        checkpointed = time.perf_counter()
        try:
            result = upload_checkpoint(self._fs, self._root, pdir, ckpt, version, attempt,
                                       copy.state.files,
                                       batch_size=self._options.upload_concurrency)
        except BaseException:
            shutil.rmtree(ckpt, ignore_errors=True)
            raise
        return (result, tuple(result.entries), (), checkpointed,
                lambda: shutil.rmtree(ckpt, ignore_errors=True))

    def _upload_changelog(self, copy: LocalCopy, pdir: str, version: int, attempt: str,
                          ) -> tuple[UploadResult, tuple[FileEntry, ...], tuple[FileEntry, ...],
                                     float, Callable[[], None]]:
        """A changelog version: flush locally (the local copy must hold what it claims once
        marked clean), upload this version's write log, keep the checkpoint files as they
        are. Same return shape as ``_upload_checkpoint``."""
        if self._base_files is None:
            assert copy.state.manifest is not None  # a lineage starts with a checkpoint
            self._base_files = read_manifest(self._fs, self._root, copy.state.manifest).files
        if self._log is None:  # no write at all this version: an empty log keeps the chain
            self._log = self._new_log(copy)
        log, self._log = self._log, None
        for cf in self._cfs.values():
            cf.flush()
        flushed = time.perf_counter()
        try:
            size = log.close()
            remote = f"{pdir}/sst/{version}-changelog-{attempt[:12]}.log"
            transfer(self._fs, "put", [log.path], [f"{self._root}/{remote}"],
                     self._options.upload_concurrency)
            entry = FileEntry(name=f"changelog-{version}.log", size=size,
                              sha256=sha256_file(log.path), remote=remote)
        except BaseException:
            log.discard()
            raise
        chain = (*copy.state.changelog, entry)
        result = UploadResult(entries=[entry], new_files={remote: log.path}, files_uploaded=1,
                              files_reused=len(copy.state.files) + len(chain) - 1,
                              bytes_uploaded=size)
        return result, self._base_files, chain, flushed, log.discard

    def commit(self, version: int, *, writer: str | None = None) -> CommitMetrics:
        started = time.perf_counter()
        candidate = self.prepare_commit(version, writer=writer)
        assert self._publish is not None
        try:
            self._publish(candidate)
        except BaseException:
            self._status = Status.FAILED
            raise
        self._status = Status.OPEN
        self.base_version = version
        self._puts = self._deletes = self._bytes_written = 0
        m = candidate.metrics
        metrics = CommitMetrics(**{**m.to_dict(),
                                   "commit_seconds": time.perf_counter() - started})
        _log.info("state commit %s", metrics.to_dict())
        return metrics

    def close(self) -> None:
        if self._status is Status.CLOSED:
            return
        self._status = Status.CLOSED
        self._pending = self._pending_space = None  # never committed: dropped like the log
        if self._log is not None:  # writes never committed: their log is worthless
            self._log.discard()
            self._log = None
        self._write_ok = False
        self._spaces.clear()
        self._cfs.clear()
        self._handles.clear()
        try:
            self._db.close()
        finally:
            if self._copy is not None:
                self._copy.release()
            if self._temp_dir is not None:
                shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"RocksDBStatePartition({self._location.url!r}, partition={self.partition}, "
                f"version={self.base_version}, {self._status.value})")


__all__ = ["EMPTY_VERSION", "RocksDBStatePartition", "encode_key", "open_rdict"]
