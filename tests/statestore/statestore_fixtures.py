"""State store fixtures: one suite runs against every storage target (file:// and real S3)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orderedstream.statestore import StateLocation, StateStoreOptions
from orderedstream.statestore.rocksdb.store import RocksDBStateStore
from tests.fixtures import unique

_machines = itertools.count()


@pytest.fixture(params=["file", "s3", "gcs", "azure"])
def state_location(request: pytest.FixtureRequest, tmp_path: Path) -> StateLocation:
    """A fresh state location, on the local filesystem, the shared SeaweedFS S3, the GCS
    emulator (fake-gcs-server) or Azurite."""
    if request.param == "file":
        return StateLocation(f"file://{tmp_path / 'remote'}")
    if request.param in ("gcs", "azure"):
        server = request.getfixturevalue("gcs" if request.param == "gcs" else "azurite")
        return StateLocation(server.url(unique("t")), storage_options=server.storage_options)
    s3 = request.getfixturevalue("s3")
    return StateLocation(request.getfixturevalue("s3_url"), storage_options=s3.storage_options)


@pytest.fixture
def make_store(state_location: StateLocation,
               tmp_path: Path) -> Callable[..., RocksDBStateStore]:
    """Factory: a RocksDBStateStore on ``state_location``. Each ``machine`` name gets its own
    local dir, so two names behave like two executors with separate disks."""

    def factory(machine: str = "m0", **options: Any) -> RocksDBStateStore:
        opts = StateStoreOptions(local_dir=str(tmp_path / "local" / machine), **options)
        return RocksDBStateStore(state_location, opts)

    return factory
