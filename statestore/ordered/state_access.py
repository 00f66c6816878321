"""The one place the ordered stage builds state stores: one store per Kafka topic.

State of Kafka partition ``(topic, p)`` is partition ``p`` of the store at
``<state_location>/topic=<topic>``. Its versions are published by the batch commit record, so
the store gets a ``RecordVersionIndex`` that already knows the manifests the driver resolved
from that record: opening a partition costs no lookup at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from orderedstream.core.errors import CommitConflictError, CorruptStateError, OptionError
from orderedstream.statestore.base import EMPTY_VERSION, CommitCandidate, StatePartition
from orderedstream.statestore.codecs import BytesCodec, PickleCodec
from orderedstream.statestore.options import StateLocation, StateStoreOptions
from orderedstream.statestore.ordered.keyed_state import STATE_SPACE, TIMEOUT_SPACE, decode_key
from orderedstream.statestore.ordered.options import OrderedOptions
from orderedstream.statestore.ordered.plan import PartitionBase, split_partition_id


class RecordVersionIndex:
    """``VersionIndex`` over manifests named by batch commit records (picklable, no I/O).

    ``manifests`` maps ``(partition, version) -> manifest``: what the driver read from the
    commit records. ``publish`` does nothing: the driver publishes a version by creating the
    batch's commit record, which names the winning candidate.
    """

    def __init__(self, manifests: Mapping[tuple[int, int], str] | None = None) -> None:
        self.manifests = dict(manifests or {})

    def resolve(self, partition: int, version: int) -> str | None:
        """The manifest of a version, as the commit records named it.

        Parameters
        ----------
        partition, version
            The state partition (the Kafka partition number) and version (a batch id).

        Returns
        -------
        str | None
            The manifest path, or ``None`` for a version not handed to this index.

        Runs on
        -------
        both"""
        return self.manifests.get((partition, version))

    def publish(self, candidate: CommitCandidate) -> None:
        """Check a candidate against the known version; the driver publishes a version by
        creating the batch's commit record, so nothing is written here.

        Parameters
        ----------
        candidate
            The prepared state version.

        Raises
        ------
        CommitConflictError
            The version is already known with another manifest.

        Runs on
        -------
        executor"""
        known = self.manifests.get((candidate.partition, candidate.version))
        if known is not None and known != candidate.manifest_path:
            raise CommitConflictError(
                f"state version {candidate.version} of partition {candidate.partition} is "
                f"already {known}; candidate {candidate.manifest_path} is refused")

    def versions(self, partition: int) -> list[int]:
        """The versions of a partition this index was handed.

        Parameters
        ----------
        partition
            The state partition.

        Returns
        -------
        list[int]
            Sorted versions.

        Runs on
        -------
        both"""
        return sorted(v for p, v in self.manifests if p == partition)

    def forget(self, partition: int, version: int) -> None:
        """Do nothing: retention of record-published versions is driven by the commit log.

        Parameters
        ----------
        partition, version
            The version the store would forget.

        Runs on
        -------
        both"""


def topic_location(options: OrderedOptions, topic: str) -> StateLocation:
    """Where the state of one topic's partitions lives.

    Parameters
    ----------
    options
        The stage's options (state location, storage options).
    topic
        The Kafka topic.

    Returns
    -------
    StateLocation
        ``<state_location>/topic=<topic>``; partition ``p``'s state is its partition ``p``.

    Runs on
    -------
    both"""
    return StateLocation(f"{options.state_location}/topic={topic}",
                         storage_options=options.storage_options)


def store_options(options: OrderedOptions) -> StateStoreOptions:
    """The state store options of the stage: its ``store_options`` and the codecs of its two
    spaces (pickled values, raw timeout index).

    Parameters
    ----------
    options
        The stage's options.

    Returns
    -------
    StateStoreOptions
        Validated options.

    Raises
    ------
    OptionError
        A ``store_options`` value is refused.
    TypeError
        A ``store_options`` name is not a ``StateStoreOptions`` field.

    Runs on
    -------
    both"""
    return StateStoreOptions(space_codecs={STATE_SPACE: PickleCodec(),
                                           TIMEOUT_SPACE: BytesCodec()},
                             **dict(options.store_options))


def _record_store_class() -> type:
    """``RocksDBStateStore`` whose ``cleanup`` is refused: its ``RecordVersionIndex`` knows only
    the versions handed to it, so generic retention would delete state that retained commit
    records still name. Retention of the ordered stage is ``OrderedStateful.cleanup_state``."""
    global _RECORD_STORE
    if _RECORD_STORE is None:
        from orderedstream.statestore.rocksdb.store import RocksDBStateStore

        class RecordStateStore(RocksDBStateStore):
            def cleanup(self, partition: int, *,
                        keep_last: int | None = None) -> dict[str, int]:
                raise OptionError(
                    f"RocksDBStateStore.cleanup is not available for the ordered stage's "
                    f"state at {self.location.url}: its versions are published by the output "
                    "table's commit records. Use OrderedStateful.cleanup_state(keep_batches=...)")

        RecordStateStore.__module__ = __name__
        RecordStateStore.__qualname__ = "RecordStateStore"
        _RECORD_STORE = RecordStateStore
    return _RECORD_STORE


_RECORD_STORE: type | None = None


def __getattr__(name: str) -> Any:
    """``RecordStateStore`` is built on first use (rocksdict loads lazily); this lets pickle
    find it by name in a fresh process."""
    if name == "RecordStateStore":
        return _record_store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(options: OrderedOptions, topic: str,
               manifests: Mapping[tuple[int, int], str] | None = None) -> Any:
    """A ``RocksDBStateStore`` for one topic whose versions come from commit records.

    Its ``cleanup`` is refused: the index knows only the versions handed to it, so generic
    retention would delete state that retained commit records still name.

    Parameters
    ----------
    options
        The stage's options.
    topic
        The Kafka topic.
    manifests
        ``(partition, version) -> manifest`` the driver read from the commit records.

    Returns
    -------
    RocksDBStateStore
        The store (rocksdict is loaded on first use).

    Runs on
    -------
    both"""
    return _record_store_class()(topic_location(options, topic), store_options(options),
                                 index=RecordVersionIndex(manifests))


def open_partition(options: OrderedOptions, topic: str, partition: int, base: PartitionBase,
                   writer: str) -> tuple[Any, StatePartition]:
    """Open one Kafka partition's state, writable, at the version ``base`` names.

    Parameters
    ----------
    options
        The stage's options.
    topic, partition
        The Kafka partition.
    base
        The committed state to start from (empty before its first version).
    writer
        The writing attempt's id (names its candidate manifest).

    Returns
    -------
    tuple[Any, StatePartition]
        ``(store, partition)``; ``store.last_restore`` tells whether the local copy was
        reused.

    Raises
    ------
    CorruptStateError
        The version's files are missing or damaged.

    Runs on
    -------
    executor (or the driver's process in a replay)"""
    manifests = {}
    if base.version != EMPTY_VERSION and base.manifest is not None:
        manifests[(partition, base.version)] = base.manifest
    store = open_store(options, topic, manifests)
    return store, store.open(partition, base.version, writer=writer)


def read_state(options: OrderedOptions, base: PartitionBase, pid: str,
               ) -> Iterator[tuple[Any, Any]]:
    """Every key of one Kafka partition's state at a committed version, from a private
    read-only copy (works beside a running query).

    Parameters
    ----------
    options
        The stage's options (state location and store options).
    base
        The committed state (version and manifest) to read.
    pid
        The Kafka partition's id, ``<topic>/<partition>``.

    Returns
    -------
    Iterator[tuple[Any, Any]]
        ``(key, value)`` pairs; none for an empty base.

    Raises
    ------
    CorruptStateError
        The version's files are gone (older than retention keeps) or damaged.

    Runs on
    -------
    both"""
    if base.version == EMPTY_VERSION or base.manifest is None:
        return
    topic, number = split_partition_id(pid)
    store = open_store(options, topic, {(number, base.version): base.manifest})
    try:
        part = store.open_read_only(number, base.version)
    except CorruptStateError as exc:
        raise CorruptStateError(
            f"{exc} (state version {base.version} of Kafka {pid}: state of batches older "
            "than the last keep_batches commit records is deleted by retention)"
        ) from exc
    with part:
        for key, (value, _timeout) in part.range(space=STATE_SPACE):
            yield decode_key(key), value
