"""The local copy's markers: the one saying a copy is clean is written without fsync, so
losing it (a power cut) must make the next open restore, never reuse the changed copy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orderedstream.statestore import EMPTY_VERSION
from orderedstream.statestore.rocksdb.store import RocksDBStateStore
from tests.statestore.test_state_store import apply_batch

Factory = Callable[..., RocksDBStateStore]


def test_a_lost_clean_marker_restores_instead_of_reusing_the_copy(make_store: Factory) -> None:
    """The marker saying a copy is clean is written without fsync (``LocalCopy.save``): a
    power cut may lose it, leaving the dirty marker written before the batch's first write.
    The next open must then restore the committed version, never reuse the changed copy."""
    store = make_store()
    with store.open(0, EMPTY_VERSION) as part:
        apply_batch(part, 0)
        part.commit(0)
    state_file = Path(store.local_copy_dir(0)) / "state.json"
    part = store.open(0, 0)
    part.put("written-in-batch-1", 1)  # marks the copy dirty (durably) before the DB changes
    dirty_marker = state_file.read_bytes()
    assert json.loads(dirty_marker)["dirty"] is True
    part.commit(1)
    part.close()
    state_file.write_bytes(dirty_marker)  # what a power cut may leave: the clean marker lost
    with store.open(0, 1) as part:
        assert not store.last_restore.reused_local, "a copy marked dirty was reused"
        assert part.get("written-in-batch-1") == 1
    with store.open(0, 0) as part:  # the older version, restored too: no batch-1 write
        assert part.get("written-in-batch-1") is None
