"""The state store contract: what a store, a partition and a commit look like to callers.

A store is one state location split into numbered partitions of key/value spaces, versioned
by micro-batch id: ``store.open(p, N - 1)``, reads and writes, ``part.commit(N)`` (prepare +
publish), ``close()``. Nothing is visible until published. ``statestore.rocksdb`` implements it.
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

    Every manifest stores its ``spec()``, so a reader that never saw the writer's code
    (``spark.read.format("rocksstate")``) rebuilds it with ``codecs.codec_from_spec``.

    Runs on
    -------
    both (encode and decode where the partition is open; spec where a manifest is written)
    """

    name: str

    def encode(self, value: Any) -> bytes:
        """The stored bytes of ``value``.

        Parameters
        ----------
        value
            A value of a kind the codec stores (else ``StateValueError``)."""

    def decode(self, data: bytes) -> Any:
        """The value ``encode`` turned into ``data``.

        Parameters
        ----------
        data
            Bytes written by ``encode`` of an equal codec."""

    def spec(self) -> dict[str, Any]:
        """A JSON-able description, enough for ``codec_from_spec`` to rebuild the codec."""


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
    """Only this version's write log was uploaded (``checkpoint_seconds``: the local flush)."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-able), for logs and metrics."""
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
        """The fields as a plain dict (JSON-able), for logs and metrics."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class CommitCandidate:
    """A prepared, not yet published, version of one partition. Small and picklable.

    Executors return it to the driver (e.g. in a Spark commit message); publishing it makes
    ``version`` exist. ``manifest_path`` is a full fsspec URL, unique to the attempt.
    """

    location_url: str
    partition: int
    version: int
    manifest_path: str
    writer: str
    metrics: CommitMetrics

    def to_json(self) -> str:
        """The candidate as JSON text (metrics included); ``from_json`` reads it back."""
        data = asdict(self)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CommitCandidate:
        """The candidate ``to_json`` wrote.

        Parameters
        ----------
        text
            JSON text from ``to_json`` (else ``ValueError``, ``KeyError`` or ``TypeError``)."""
        data = json.loads(text)
        data["metrics"] = CommitMetrics(**data["metrics"])
        return cls(**data)


@runtime_checkable
class VersionIndex(Protocol):
    """Which candidate manifest *is* version N of partition P. Pluggable.

    The default (``index.PointerVersionIndex``) creates one pointer object per (partition,
    version) exclusively; the ordered stage's index is the sink's batch commit record, whose
    ``publish`` may be a no-op (the driver writes the record). Must be picklable.

    Runs on
    -------
    both (resolve on executors at open; publish, versions and forget on the driver too)
    """

    def resolve(self, partition: int, version: int) -> str | None:
        """The manifest URL published as ``version`` of ``partition``, or None if unpublished.

        Parameters
        ----------
        partition, version
            Which published version to look up."""

    def publish(self, candidate: CommitCandidate) -> None:
        """Make ``candidate`` the version of its (partition, version).

        Parameters
        ----------
        candidate
            A prepared candidate (``StatePartition.prepare_commit``); ``CommitConflictError``
            if another was published for that (partition, version) first (a zombie loses)."""

    def versions(self, partition: int) -> list[int]:
        """Published versions of ``partition``, ascending (used by retention and ``latest``).

        Parameters
        ----------
        partition
            The partition whose versions to list."""

    def forget(self, partition: int, version: int) -> None:
        """Drop the record of ``version`` (retention). May be a no-op for external indexes.

        Parameters
        ----------
        partition, version
            The published version to forget."""


class StatePartition(abc.ABC):
    """One partition's state at one version, open for reading and (unless read-only) writing.

    Owned by one thread of one process (the local copy is locked). Also the transaction:
    writes go straight to the local RocksDB copy (WAL off); ``prepare_commit`` snapshots it;
    closed without commit, the local copy is dirty and the next ``open`` restores from storage.
    A context manager. ``key``: bytes or a str (stored as UTF-8); ``space``: a state space.

    Runs on
    -------
    executor (the task that opened it); driver for read-only views and tests
    """

    partition: int
    base_version: int
    """The version this partition was opened at (or last committed)."""

    @abc.abstractmethod
    def get(self, key: Key, default: Any = None, *, space: str = DEFAULT_SPACE) -> Any:
        """The decoded value of ``key``, or ``default`` if absent. A key with a TTL stays
        readable until ``expire`` removes it (deterministic replays).

        Parameters
        ----------
        key, space
            The key to read, and its space.
        default
            What to return when ``key`` holds no value."""

    def get_for_update(self, key: Key, default: Any = None, *,
                       space: str = DEFAULT_SPACE) -> Any:
        """``get`` for a key the caller writes back later: the write may skip a second read.

        Parameters
        ----------
        key, default, space
            As in ``get``."""
        return self.get(key, default, space=space)

    @abc.abstractmethod
    def contains(self, key: Key, *, space: str = DEFAULT_SPACE) -> bool:
        """Whether ``key`` holds a value.

        Parameters
        ----------
        key, space
            The key to look up, and its space."""

    @abc.abstractmethod
    def multi_get(self, keys: Sequence[Key], default: Any = None, *,
                  space: str = DEFAULT_SPACE) -> list[Any]:
        """Values of ``keys`` in order (one RocksDB MultiGet), ``default`` for missing ones.

        Parameters
        ----------
        keys
            The keys to read, in the order of the result.
        default, space
            As in ``get``."""

    @abc.abstractmethod
    def range(self, start: Key | None = None, end: Key | None = None, *,
              space: str = DEFAULT_SPACE, reverse: bool = False) -> Iterator[tuple[bytes, Any]]:
        """``(key, value)`` pairs with ``start <= key < end`` in byte order (streamed).

        Parameters
        ----------
        start, end
            The bounds (inclusive, exclusive); None leaves that side open.
        space, reverse
            The space to scan; descending key order when ``reverse``."""

    @abc.abstractmethod
    def prefix(self, prefix: Key, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, Any]]:
        """``(key, value)`` pairs whose key starts with ``prefix``, in byte order.

        Parameters
        ----------
        prefix, space
            The key prefix to scan, and its space."""

    def items(self, *, space: str = DEFAULT_SPACE) -> Iterator[tuple[bytes, Any]]:
        """All pairs of ``space`` in key order.

        Parameters
        ----------
        space
            The space to scan."""
        return self.range(space=space)

    @abc.abstractmethod
    def spaces(self) -> list[str]:
        """The user state spaces this partition holds (``default`` first)."""

    @abc.abstractmethod
    def num_keys(self, *, space: str | None = None) -> int:
        """Number of stored keys (RocksDB's estimate under ``exact_key_count=False``).

        Parameters
        ----------
        space
            The space to count, or None for all user spaces."""

    @abc.abstractmethod
    def put(self, key: Key, value: Any, *, space: str = DEFAULT_SPACE,
            ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        """Store ``value``. A store may buffer blind puts and write them in batches; every
        read, delete and commit of the partition sees them.

        Parameters
        ----------
        key, value, space
            Where to store what; the space's codec encodes ``value`` (or raises
            ``StateValueError``).
        ttl_ms, now_ms
            The key expires at ``now_ms + ttl_ms`` (``now_ms`` defaults to the wall clock;
            pass event time for deterministic replays). No ttl clears an earlier expiry."""

    @abc.abstractmethod
    def delete(self, key: Key, *, space: str = DEFAULT_SPACE) -> None:
        """Remove ``key`` (no error if absent).

        Parameters
        ----------
        key, space
            The key to remove, and its space."""

    @abc.abstractmethod
    def put_many(self, items: Iterable[tuple[Key, Any]], *, space: str = DEFAULT_SPACE,
                 ttl_ms: int | None = None, now_ms: int | None = None) -> None:
        """Store many pairs through one RocksDB WriteBatch (in bounded chunks).

        Parameters
        ----------
        items
            ``(key, value)`` pairs.
        space, ttl_ms, now_ms
            As in ``put``, for every pair (``StateValueError`` for a value the codec
            refuses)."""

    @abc.abstractmethod
    def expire(self, now_ms: int | None = None, *,
               limit: int | None = None) -> Iterator[tuple[str, bytes, Any]]:
        """Delete keys whose expiry is ``<= now_ms`` and yield ``(space, key, last_value)``.
        Scans only the expiry index (cost proportional to the expired keys); a yielded key is
        deleted as the iterator advances: exhaust it before committing.

        Parameters
        ----------
        now_ms
            The clock in milliseconds (default: the wall clock).
        limit
            Stop after this many keys (None: all that are due)."""

    @abc.abstractmethod
    def prepare_commit(self, version: int, *, writer: str | None = None) -> CommitCandidate:
        """Snapshot the state as a candidate for ``version`` (returned): upload new SST files
        and an attempt-unique manifest. Nothing is visible until published.

        Parameters
        ----------
        version
            The version to prepare (> ``base_version``).
        writer
            Who prepares it (e.g. the Spark task attempt), recorded in the manifest."""

    @abc.abstractmethod
    def commit(self, version: int, *, writer: str | None = None) -> CommitMetrics:
        """``prepare_commit`` + publish through the store's index. Afterwards the partition
        stays open at ``version`` (``base_version == version``) for the next batch.

        Parameters
        ----------
        version, writer
            As in ``prepare_commit``; ``CommitConflictError`` if another attempt published
            ``version`` first."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the RocksDB handle and the local-copy lock. Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StateStoreBase(abc.ABC):
    """All partitions of one state location. Picklable: ship it to executors and ``open``.

    Runs on
    -------
    both (open on executors; publish, latest_version, partitions and cleanup on the driver)
    """

    @abc.abstractmethod
    def open(self, partition: int, version: int, *, writer: str | None = None) -> StatePartition:
        """Lock the local copy of ``partition`` and bring it to ``version`` (reuse it when it is
        already there, else download only the missing files).

        Parameters
        ----------
        partition, version
            What to open (``EMPTY_VERSION`` opens empty); ``StateNotFoundError`` if
            ``version`` was never published.
        writer
            Who opens it (recorded by the commits it makes)."""

    @abc.abstractmethod
    def open_read_only(self, partition: int, version: int | None = None) -> StatePartition:
        """A read-only view of a committed version in a private temp copy; no lock on the
        writer's local copy is taken, so it works beside a running query.

        Parameters
        ----------
        partition, version
            What to open (``version`` None: the latest); ``StateNotFoundError`` if
            ``version`` was never published."""

    @abc.abstractmethod
    def publish(self, candidate: CommitCandidate) -> None:
        """Publish a candidate through the store's ``VersionIndex``.

        Parameters
        ----------
        candidate
            From ``StatePartition.prepare_commit``; ``CommitConflictError`` if another
            candidate was published for that version first."""

    @abc.abstractmethod
    def latest_version(self, partition: int) -> int:
        """The newest published version of ``partition``, or ``EMPTY_VERSION``.

        Parameters
        ----------
        partition
            The partition to look up."""

    @abc.abstractmethod
    def partitions(self) -> list[int]:
        """Partitions that have any published version at this location."""

    @abc.abstractmethod
    def cleanup(self, partition: int, *, keep_last: int | None = None) -> Mapping[str, int]:
        """Retention: delete manifests and files no retained version references, including
        orphans of crashed attempts for versions already decided; counts of what went.

        Parameters
        ----------
        partition
            The partition to clean.
        keep_last
            Versions to keep (None: the store's option)."""


__all__ = [
    "DEFAULT_SPACE", "EMPTY_VERSION", "Codec", "CommitCandidate", "CommitMetrics", "Key",
    "RestoreMetrics", "StatePartition", "StateStoreBase", "VersionIndex",
]
