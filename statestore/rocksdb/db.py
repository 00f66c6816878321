"""One partition's open RocksDB and its spaces, shared by every part of
``RocksDBStatePartition``, and the slow path that finds or creates a space.

Spaces are column families; ``__meta__`` holds key counts, ``__ttl__`` the expiry index.
"""

from __future__ import annotations

import abc
import enum
import os
import re
import struct
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol, cast

import rocksdict

from orderedstream.core.errors import (
    InvariantError,
    OptionError,
    StateTransactionError,
    StateValueError,
)
from orderedstream.statestore.base import Codec, CommitCandidate, Key, StatePartition
from orderedstream.statestore.options import StateLocation, StateStoreOptions
from orderedstream.statestore.rocksdb.changelog import ChangelogWriter
from orderedstream.statestore.rocksdb.keepopen import Kept
from orderedstream.statestore.rocksdb.localcopy import LocalCopy
from orderedstream.statestore.rocksdb.options import make_options, write_options

META_CF = "__meta__"
TTL_CF = "__ttl__"
_SPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
_COUNT_PREFIX = b"count/"
_I64 = struct.Struct(">q")
_MEMO_MAX = 1 << 14
"""Entries a space's presence memo holds before it is cleared (``Space.memo_max``)."""


class Status(enum.Enum):
    """A partition's state: open, prepared (a candidate exists), failed, or closed."""

    OPEN = "open"
    PREPARED = "prepared"
    FAILED = "failed"
    CLOSED = "closed"


def encode_key(key: Key) -> bytes:
    """``key`` as the bytes stored: bytes as they are, a str as UTF-8.

    Parameters
    ----------
    key
        bytes, a str, or a bytearray / memoryview (copied).

    Raises
    ------
    StateValueError
        ``key`` is of another type.

    Runs on
    -------
    both (where a partition is open)"""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise StateValueError(f"state keys are bytes or str, got {type(key).__name__}")


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound).

    Parameters
    ----------
    prefix
        A key prefix (empty or all ``0xff``: no bound).

    Runs on
    -------
    both (prefix scans)"""
    data = bytearray(prefix)
    while data and data[-1] == 0xFF:
        data.pop()
    if not data:
        return None
    data[-1] += 1
    return bytes(data)


def count_entry(space: str, count: int) -> tuple[bytes, bytes]:
    """The ``__meta__`` key and value that store ``space``'s key count.

    Parameters
    ----------
    space, count
        The space and its number of keys.

    Runs on
    -------
    executor (the committing task)"""
    return _COUNT_PREFIX + space.encode(), _I64.pack(count)


def options_fingerprint(options: StateStoreOptions) -> str:
    """What of ``options`` a DB is opened with: a kept DB opened otherwise is not reused.

    Parameters
    ----------
    options
        The store's options (only the memory sizes count).

    Runs on
    -------
    executor (``keepopen``)"""
    return (f"{options.block_cache_bytes}/{options.write_buffer_bytes}/"
            f"{options.max_write_buffers}/{options.memtable_budget_bytes}")


def open_rdict(path: str, options: StateStoreOptions, *, read_only: bool) -> rocksdict.Rdict:
    """Open (or create) the DB at ``path`` with all its column families.

    Parameters
    ----------
    path
        The DB directory.
    options
        The store's options (``rocksdb.options.make_options``).
    read_only
        Open read-only (no writes). RocksDB's errors (its lock held, a damaged DB) pass
        through as rocksdict's ``Exception``.

    Runs on
    -------
    both (executors; the driver for read-only views)"""
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


class RawFamily(Protocol):
    """A raw-mode ``rocksdict.Rdict`` column family, typed with bytes keys and values (a
    static type only: the object is the ``Rdict`` itself)."""

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None.

        Parameters
        ----------
        key
            The stored key."""

    def __getitem__(self, keys: list[bytes]) -> list[bytes | None]: ...

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``.

        Parameters
        ----------
        key, value
            The stored bytes."""

    def delete(self, key: bytes) -> None:
        """Remove ``key``.

        Parameters
        ----------
        key
            The stored key."""

    def items(self, backwards: bool = False,
              from_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs in key order from ``from_key`` on.

        Parameters
        ----------
        backwards, from_key
            Descending order; the first key (None: an end of the family)."""

    def flush(self, wait: bool = True) -> None:
        """Write the memtables to SST files.

        Parameters
        ----------
        wait
            Return once the flush is done."""

    def property_int_value(self, name: str) -> int | None:
        """A RocksDB integer property.

        Parameters
        ----------
        name
            The property, e.g. ``rocksdb.estimate-num-keys``."""

    def compact_range(self, begin: bytes | None, end: bytes | None,
                      compact_opt: rocksdict.CompactOptions = ...) -> None:
        """Compact the keys from ``begin`` to ``end``.

        Parameters
        ----------
        begin, end, compact_opt
            The key range (None: unbounded) and RocksDB's compaction options."""


class Space:
    """What the hot path needs of one space, found with one dict lookup: the column family,
    its WriteBatch handle, the codec's bound methods, and what is known of keys' presence.

    ``last_read``/``last_present``: the last ``get``'s key and whether it held a value, so a
    read-modify-write's ``put`` is counted without a second read. ``known`` (exact counting
    only, else None): keys read or written -> whether they hold a value, so later writes count
    without reading; kept true by every write path, cleared at ``memo_max`` entries.
    """

    __slots__ = ("cf", "decode", "encode", "handle", "known", "last_present", "last_read",
                 "memo_max", "name")

    def __init__(self, name: str, cf: RawFamily, handle: rocksdict.ColumnFamily, codec: Codec,
                 exact: bool) -> None:
        self.name = name
        self.cf = cf
        self.handle = handle
        self.encode = codec.encode
        self.decode = codec.decode
        self.known: dict[bytes, bool] | None = {} if exact else None
        self.memo_max = _MEMO_MAX
        self.last_read: bytes | None = None
        self.last_present = False


class Scan:
    """One iteration over a column family (``items``) that the partition's ``close`` cuts off.

    rocksdict keeps a DB open, its LOCK taken, while any iterator or family over it lives: a
    generator left suspended at ``close`` would hold the DB until collected, and the next open
    of the local copy failed on the lock. Generators keep only their scan across a ``yield``."""

    __slots__ = ("__weakref__", "_check", "_items", "cf")

    def __init__(self, cf: RawFamily, items: Iterator[tuple[bytes, bytes]],
                 check: Callable[[], None]) -> None:
        self.cf: RawFamily | None = cf
        self._items: Iterator[tuple[bytes, bytes]] | None = items
        self._check = check

    def __iter__(self) -> Scan:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        items = self._items
        if items is None:
            self._check()  # the partition is closed: raises
            raise InvariantError("a state scan was released while its partition is open")
        return next(items)

    def release(self) -> None:
        """Drop the iterator and the family (``close``); the next step raises "is closed".

        Runs on
        -------
        both (where the partition is open)"""
        self._items = self.cf = None


class PartitionDB(StatePartition):
    """The DB, spaces and status of one partition; ``writes``, ``expiry`` and ``committer``
    build on it (``_flush`` is the one call they make of each other through it)."""

    def __init__(self, *, location: StateLocation, fs: object, root: str, partition: int,
                 version: int, options: StateStoreOptions, db_path: str,
                 copy: LocalCopy | None, publish: Callable[[CommitCandidate], None] | None,
                 codecs: Mapping[str, Codec] | None = None, temp_dir: str | None = None,
                 kept: Kept | None = None) -> None:
        if (copy is None) != (publish is None):
            raise InvariantError(
                f"state partition {partition} of {location.url}: a writable partition needs "
                f"both a local copy and a publisher, a read-only one neither (copy={copy!r}, "
                f"publish={publish!r})")
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
        read_only = copy is None
        self._db_path = db_path
        self._handles: dict[str, rocksdict.ColumnFamily] = {}
        self._spaces: dict[str, Space] = {}
        if kept is not None:  # kept open since this process closed it (``keepopen``)
            self._db = kept.db
            self._cfs: dict[str, RawFamily] = dict(kept.families)
        else:
            self._db = open_rdict(db_path, options, read_only=read_only)
            self._cfs = {"default": cast(RawFamily, self._db)}
            for name in rocksdict.Rdict.list_cf(db_path, make_options(options)):
                if name != "default":
                    self._cfs[name] = cast(RawFamily, self._db.get_column_family(name))
        self._counts: dict[str, int] = self._load_counts()
        self._status = Status.OPEN
        self._write_ok = False
        """Writes checked allowed and the copy marked dirty (reset by prepare/close)."""
        self._puts = self._deletes = self._bytes_written = 0
        self._changelog_mode = options.changelog and not read_only
        self._log: ChangelogWriter | None = None
        """This version's write log (changelog mode; created by the first write)."""
        self._pending: rocksdict.WriteBatch | None = None
        """Blind ``put``s not yet in the DB (one space, bounded): see ``rocksdb.writes``."""
        self._pending_space: Space | None = None
        self._pending_keys: list[bytes] = []
        self._pending_bytes = 0
        self._scans: weakref.WeakSet[Scan] = weakref.WeakSet()
        """The iterations under way (``Scan``), cut off at ``close``."""

    @abc.abstractmethod
    def _flush(self) -> None:
        """Write the buffered blind puts, so reads and commits see them (``writes``)."""

    def _load_counts(self) -> dict[str, int]:
        meta = self._cfs.get(META_CF)
        if meta is None:
            return {}
        counts = {}
        for key, value in meta.items(from_key=_COUNT_PREFIX):
            if not key.startswith(_COUNT_PREFIX):
                break
            counts[key[len(_COUNT_PREFIX):].decode()] = _I64.unpack(value)[0]
        return counts

    def _codec(self, space: str) -> Codec:
        codec = self._codecs.get(space)
        return codec if codec is not None else self._options.codec_for(space)

    def _find_cf(self, space: str) -> RawFamily | None:
        """The column family of ``space`` if it exists; refuses invalid names."""
        cf = self._cfs.get(space)
        if cf is None and (space.startswith("__") and space not in (META_CF, TTL_CF) or (
                not space.startswith("__") and not _SPACE_RE.match(space))):
            raise OptionError(f"state space name {space!r} is invalid: use 1-100 of "
                              "A-Z a-z 0-9 _ . - starting with a letter or digit")
        return cf

    def _create_cf(self, space: str) -> RawFamily:
        """The column family of ``space``, created (a write) if it does not exist yet."""
        cf = self._find_cf(space)
        if cf is None:
            self._writable()
            cf = cast(RawFamily, self._db.create_column_family(space,
                                                               make_options(self._options)))
            self._cfs[space] = cf
            if self._log is not None:
                self._log.space_id(space)  # replay recreates the family even if left empty
        return cf

    def _new_space(self, space: str, cf: RawFamily) -> Space:
        handle = self._handles.get(space)
        if handle is None:
            handle = self._handles[space] = self._db.get_column_family_handle(space)
        s = self._spaces[space] = Space(space, cf, handle, self._codec(space), self._exact)
        return s

    def _space(self, space: str) -> Space | None:
        """The slow path of every read: checks, caches the space; None if it does not exist."""
        self._readable()
        s = self._spaces.get(space)
        if s is None:
            cf = self._find_cf(space)
            if cf is None:
                return None
            s = self._new_space(space, cf)
        return s

    def _space_for_write(self, space: str) -> Space:
        """The slow path of every write: checks writes are allowed, creates the space."""
        self._writable()
        self._readable()
        s = self._spaces.get(space)
        if s is None:
            s = self._new_space(space, self._create_cf(space))
        return s

    def _read_only_error(self) -> StateTransactionError:
        return StateTransactionError(
            f"state partition {self.partition} of {self._location.url} was opened "
            f"read-only at version {self.base_version}; open it with RocksDBStateStore.open "
            "to write")

    def _writable(self) -> None:
        copy = self._copy
        if copy is None:
            raise self._read_only_error()
        if self._status is not Status.OPEN:
            raise StateTransactionError(
                f"state partition {self.partition} of {self._location.url} is "
                f"{self._status.value}; writes are accepted only before prepare_commit (reopen "
                "the partition at the committed version to continue)")
        if not copy.state.dirty:
            copy.state.dirty = True
            copy.save()
        if self._changelog_mode and self._log is None:
            self._log = self._new_log(copy)
        self._write_ok = True

    @staticmethod
    def _new_log(copy: LocalCopy) -> ChangelogWriter:
        """A write log in the local copy's directory (``LocalCopy.remove_stale`` drops old)."""
        return ChangelogWriter(os.path.join(copy.dir, f"changelog-{uuid.uuid4().hex}.log"))

    def _scan(self, cf: RawFamily, *, backwards: bool = False,
              from_key: bytes | None = None) -> Scan:
        """``cf.items(...)`` as a :class:`Scan` that ``close`` cuts off."""
        scan = Scan(cf, cf.items(backwards=backwards, from_key=from_key), self._readable)
        self._scans.add(scan)
        return scan

    def _release_scans(self) -> None:
        for scan in list(self._scans):
            scan.release()
        self._scans.clear()

    def _readable(self) -> None:
        if self._status is Status.CLOSED:
            raise StateTransactionError(
                f"state partition {self.partition} of {self._location.url} is closed")

    def _bump(self, space: str, delta: int) -> None:
        self._counts[space] = self._counts.get(space, 0) + delta


__all__ = ["META_CF", "TTL_CF", "PartitionDB", "RawFamily", "Space", "Status", "count_entry",
           "encode_key", "open_rdict", "options_fingerprint", "prefix_end"]
