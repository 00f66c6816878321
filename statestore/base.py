"""The state store contract: what a store, a partition and a commit look like to callers.

A *store* is one state location (an fsspec URL) split into numbered *partitions*; each
partition holds key/value *spaces* (RocksDB column families) and is versioned by the
micro-batch id. The life of one batch on one partition::

    part = store.open(partition, version=N - 1)   # EMPTY_VERSION (-1) before the first batch
    part.put(b"k", {"count": 1})                   # get / put / delete / scans ...
    candidate = part.prepare_commit(N)             # upload new files + a candidate manifest
    store.publish(candidate)                       # make it version N (exclusive; zombies lose)
    part.close()

``part.commit(N)`` does prepare + publish with the store's ``VersionIndex``. Nothing a
partition writes is visible to anyone until the version is published; a candidate that is never
published is garbage, collected by retention.

This module has no RocksDB in it: ``orderedstream.statestore.rocksdb`` implements it.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Self, runtime_checkable

EMPTY_VERSION = -1
"""The version a partition has before its first commit: ``open(p, EMPTY_VERSION)`` is empty."""

DEFAULT_SPACE = "default"
"""The state space (column family) used when a call names none."""

Key = bytes | str
"""Keys are bytes; a str is stored as its UTF-8 bytes. Scans return bytes, in byte order."""


@runtime_checkable
class Codec(Protocol):
    """Turns values into bytes and back. Must be picklable (it travels to executors).

    ``spec()`` is a JSON-able description stored in every manifest, so a reader that never
    saw the writer's code (``spark.read.format("rocksstate")``) can rebuild the codec with
    ``orderedstream.statestore.codecs.codec_from_spec``.
    """

    name: str

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...

    def spec(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class CommitMetrics:
    """What one commit did. Returned to the caller and logged (logger ``statestore``)."""

    partition: int
    version: int
    num_keys: int
    """Keys in the partition after this commit, all spaces (exact count)."""
    puts: int
    deletes: int
    bytes_written: int
    """Key + encoded value bytes put since the partition was opened."""
    files_total: int
    files_uploaded: int
    files_reused: int
    """SST files already uploaded by an earlier version and referenced again."""
    bytes_uploaded: int
    bytes_total: int
    """Size of all files the version references (the full snapshot size)."""
    checkpoint_seconds: float
    upload_seconds: float
    commit_seconds: float
    """Prepare (+ publish, when done through ``commit``) wall time."""
    manifest_path: str
    changelog: bool = False
    """True when only this version's write log was uploaded (changelog mode between full
    checkpoints); ``checkpoint_seconds`` is then the local flush."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class RestoreMetrics:
    """What opening a partition at a version cost. ``reused_local``: no download at all;
    ``kept_open``: not even a RocksDB open (this process had kept it open since it closed it)."""

    partition: int
    version: int
    reused_local: bool
    files_downloaded: int
    files_reused: int
    bytes_downloaded: int
    restore_seconds: float
    kept_open: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class CommitCandidate:
    """A prepared, not yet published, version of one partition. Small and picklable.

    Executors return it to the driver (e.g. inside a Spark commit message); publishing it
    (``VersionIndex.publish``) is what makes ``version`` exist. ``manifest_path`` is a full
    fsspec URL, unique to the attempt that wrote it.
    """

    location_url: str
    partition: int
    version: int
    manifest_path: str
    writer: str
    metrics: CommitMetrics

    def to_json(self) -> str:
        data = asdict(self)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CommitCandidate:
        data = json.loads(text)
        data["metrics"] = CommitMetrics(**data["metrics"])
        return cls(**data)


@runtime_checkable
class VersionIndex(Protocol):
    """Which candidate manifest *is* version N of partition P. Pluggable.

    The default (``orderedstream.statestore.index.PointerVersionIndex``) keeps one pointer object
    per (partition, version), created exclusively. The ordered stage supplies an index backed by
    the sink's batch commit record instead, where ``publish`` may be a no-op because the driver
    publishes by writing the record. Implementations must be picklable.
    """

    def resolve(self, partition: int, version: int) -> str | None:
        """The manifest URL published as ``version`` of ``partition``, or None if unpublished."""
        ...

    def publish(self, candidate: CommitCandidate) -> None:
        """Make ``candidate`` the version. Raises ``CommitConflictError`` if another candidate
        was published for that (partition, version) first (a zombie attempt loses)."""
        ...

    def versions(self, partition: int) -> list[int]:
        """Published versions of ``partition``, ascending (used by retention and ``latest``)."""
        ...

    def forget(self, partition: int, version: int) -> None:
        """Drop the record of ``version`` (retention). May be a no-op for external indexes."""
        ...


class StatePartition(abc.ABC):
    """One partition's state at one version, open for reading and (unless read-only) writing.

    Owned by one thread of one process (the local copy is locked). Also the transaction:
    writes go straight to the local RocksDB copy (WAL off); ``prepare_commit`` snapshots it;
    a partition closed without commit leaves its local copy dirty and the next ``open``
    restores the wanted version from storage. Use it as a context manager to always close.
    """

    partition: int
    base_version: int
    """The version this partition was opened at (or last committed)."""

    # ---- reads ---------------------------------------------------------------------------
    @abc.abstractmethod
    def get(self, key: Key, default: Any = None, *, space: str = DEFAULT_SPACE) -> Any:
        """The decoded value of ``key``, or ``default`` if absent. A key with a TTL stays
        readable until ``expire`` removes it (so replays with event time are deterministic)."""

    def get_for_update(self, key: Key, default: Any = None, *,
                       space: str = DEFAULT_SPACE) -> Any:
        """``get`` for a key the caller will write back later (e.g. in a ``put_many``):
        a store may remember what the read found so that write costs no second read."""
        return self.get(key, default, space=space)

    @abc.abstractmethod
    def contains(self, key: Key, *, space: str = DEFAULT_SPACE) -> bool:
        """Whether ``key`` holds a value."""

    @abc.abstractmethod
    def multi_get(self, keys: Sequence[Key], default: Any = None, *,
                  space: str = DEFAULT_SPACE) -> list[Any]:
        """Values of ``keys`` in order (one RocksDB MultiGet), ``default`` for missing ones."""

    @abc.abstractmethod
    def range(self, start: Key | None = None, end: Key | None = None, *,
              space: str = DEFAULT_SPACE, reverse: bool = False) -> Iterator[tuple[bytes, Any]]:
        """``(key, value)`` pairs with ``start <= key < end`` in byte order (streamed)."""

    @abc.abstractmethod
    def prefix(self, prefix: Key, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, Any]]:
        """``(key, value)`` pairs whose key starts with ``prefix``, in byte order."""

    def items(self, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, Any]]:
        """All pairs of ``space`` in key order."""
        return self.range(space=space)

    @abc.abstractmethod
    def spaces(self) -> list[str]:
        """The user state spaces this partition holds (``default`` first)."""

    @abc.abstractmethod
    def num_keys(self, *, space: str | None = None) -> int:
        """Number of stored keys (all user spaces when ``space`` is None); exact unless the
        store runs with ``exact_key_count=False`` (then RocksDB's estimate)."""

    # ---- writes --------------------------------------------------------------------------
    @abc.abstractmethod
    def put(self, key: Key, value: Any, *, space: str = DEFAULT_SPACE,
            ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        """Store ``value``. With ``ttl_ms`` the key expires at ``now_ms + ttl_ms`` (``now_ms``
        defaults to the wall clock; pass event time for deterministic replays). A put without
        ttl clears any earlier expiry. A store may buffer blind puts and write them in
        batches; every read, delete and commit of the partition sees them."""

    @abc.abstractmethod
    def delete(self, key: Key, *, space: str = DEFAULT_SPACE) -> None:
        """Remove ``key`` (no error if absent)."""

    @abc.abstractmethod
    def put_many(self, items: Iterable[tuple[Key, Any]], *, space: str = DEFAULT_SPACE,
                 ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        """Store many pairs through one RocksDB WriteBatch (in bounded chunks)."""

    @abc.abstractmethod
    def expire(self, now_ms: int | None = None, *,
               limit: int | None = None) -> Iterator[tuple[str, bytes, Any]]:
        """Delete keys whose expiry is ``<= now_ms`` and yield ``(space, key, last_value)``.

        Only the expiry index is scanned, so the cost is proportional to the expired keys.
        The deletion of a yielded key happens as the iterator advances; exhaust it (or pass
        ``limit``) before committing."""

    # ---- versions ------------------------------------------------------------------------
    @abc.abstractmethod
    def prepare_commit(self, version: int, *, writer: str | None = None) -> CommitCandidate:
        """Snapshot the state as a candidate for ``version`` (> ``base_version``): upload new
        SST files and an attempt-unique manifest. Nothing is visible until published.
        ``writer`` (e.g. the Spark task attempt) is recorded in the manifest."""

    @abc.abstractmethod
    def commit(self, version: int, *, writer: str | None = None) -> CommitMetrics:
        """``prepare_commit`` + publish through the store's index. Afterwards the partition
        stays open at ``version`` (``base_version == version``) for the next batch."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the RocksDB handle and the local-copy lock. Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StateStoreBase(abc.ABC):
    """All partitions of one state location. Picklable: ship it to executors and ``open``."""

    @abc.abstractmethod
    def open(self, partition: int, version: int, *, writer: str | None = None) -> StatePartition:
        """Lock the local copy of ``partition`` and bring it to ``version`` (reuse it when it is
        already there, else download only the missing files). ``EMPTY_VERSION`` opens empty.
        Raises ``StateNotFoundError`` when ``version`` was never published."""

    @abc.abstractmethod
    def open_read_only(self, partition: int, version: int | None = None) -> StatePartition:
        """A read-only view of a committed version (latest when None) in a private temp copy;
        no lock on the writer's local copy is taken, so it works beside a running query."""

    @abc.abstractmethod
    def publish(self, candidate: CommitCandidate) -> None:
        """Publish a candidate through the store's ``VersionIndex``."""

    @abc.abstractmethod
    def latest_version(self, partition: int) -> int:
        """The newest published version of ``partition``, or ``EMPTY_VERSION``."""

    @abc.abstractmethod
    def partitions(self) -> list[int]:
        """Partitions that have any published version at this location."""

    @abc.abstractmethod
    def cleanup(self, partition: int, *, keep_last: int | None = None) -> Mapping[str, int]:
        """Retention: keep the last ``keep_last`` versions (default from options); delete
        manifests and files no retained version references, including orphans of crashed
        attempts for versions already decided. Returns counts of what was deleted."""


__all__ = [
    "DEFAULT_SPACE",
    "EMPTY_VERSION",
    "Codec",
    "CommitCandidate",
    "CommitMetrics",
    "Key",
    "RestoreMetrics",
    "StatePartition",
    "StateStoreBase",
    "VersionIndex",
]
