"""RocksDB per-key state off the JVM heap, versioned by batch id, snapshotted to fsspec storage.

Usage::

    from orderedstream.statestore import EMPTY_VERSION, RocksDBStateStore, StateLocation

    location = StateLocation("s3://lake/state/q1", storage_options={"endpoint_url": ...})
    store = RocksDBStateStore(location)
    with store.open(partition=0, version=EMPTY_VERSION) as part:
        part.put("user-1", {"clicks": 3})
        metrics = part.commit(0)          # version 0 = batch 0
    with store.open(0, version=0) as part:  # any machine: restores from the URL
        assert part.get("user-1") == {"clicks": 3}

Contract in ``orderedstream.statestore.base`` (``StateStoreBase``, ``StatePartition``); the
RocksDB backend, ``RocksDBStateStore``, in ``orderedstream.statestore.rocksdb``; snapshot upload,
restore, manifests, retention, codecs and TTL in their own modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orderedstream.statestore.base import (
    DEFAULT_SPACE,
    EMPTY_VERSION,
    Codec,
    CommitCandidate,
    CommitMetrics,
    Key,
    RestoreMetrics,
    StatePartition,
    StateStoreBase,
    VersionIndex,
)
from orderedstream.statestore.codecs import (
    BytesCodec,
    JsonCodec,
    PickleCodec,
    SchemaCodec,
    codec_from_spec,
)
from orderedstream.statestore.index import PointerVersionIndex
from orderedstream.statestore.options import StateLocation, StateStoreOptions

if TYPE_CHECKING:  # for type checkers only: at run time it loads on first use (below)
    from orderedstream.statestore.rocksdb.store import RocksDBStateStore


def __getattr__(name: str) -> Any:
    # RocksDBStateStore pulls in rocksdict; import it on first use so light imports stay light.
    if name == "RocksDBStateStore":
        from orderedstream.statestore.rocksdb.store import RocksDBStateStore

        return RocksDBStateStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_SPACE",
    "EMPTY_VERSION",
    "BytesCodec",
    "Codec",
    "CommitCandidate",
    "CommitMetrics",
    "JsonCodec",
    "Key",
    "PickleCodec",
    "PointerVersionIndex",
    "RestoreMetrics",
    "RocksDBStateStore",
    "SchemaCodec",
    "StateLocation",
    "StatePartition",
    "StateStoreBase",
    "StateStoreOptions",
    "VersionIndex",
    "codec_from_spec",
]
