"""The state store against real storage: every test runs on file:// and on SeaweedFS S3."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest

from orderedstream.core.errors import (
    CommitConflictError,
    CorruptStateError,
    OptionError,
    StateLockedError,
    StateNotFoundError,
    StateTransactionError,
)
from orderedstream.statestore import EMPTY_VERSION, CommitCandidate, JsonCodec, StateStoreOptions
from orderedstream.statestore.manifest import read_manifest
from orderedstream.statestore.rocksdb import db as db_mod
from orderedstream.statestore.rocksdb.store import RocksDBStateStore

Factory = Callable[..., RocksDBStateStore]


def apply_batch(part, batch: int, n: int = 2000) -> None:  # type: ignore[no-untyped-def]
    """A deterministic 'micro-batch': counters per key, one deletion, one other space."""
    for i in range(n):
        key = f"k{(i * 7 + batch) % 5000:05d}"
        part.put(key, part.get(key, 0) + batch + 1)
    part.delete(f"k{batch:05d}")
    part.put(f"batch-{batch}", {"batch": batch}, space="meta")


def snapshot(part) -> dict[tuple[str, bytes], object]:  # type: ignore[no-untyped-def]
    return {(space, k): v for space in part.spaces() for k, v in part.items(space=space)}


def test_commit_restore_round_trip_on_another_machine(make_store: Factory) -> None:
    writer = make_store("writer")
    with writer.open(0, EMPTY_VERSION) as part:
        part.put_many((f"user-{i:04d}", {"n": i}) for i in range(3000))
        part.put(b"\x00\xffbin", b"raw", space="blobs")
        first = part.commit(0)
        apply_batch(part, 1)
        second = part.commit(1)
        expected = snapshot(part)
        keys = part.num_keys()
    assert first.num_keys == 3001 and first.files_uploaded >= 1 and first.bytes_uploaded > 0
    assert second.files_reused >= 1, "unchanged SSTs of version 0 must be reused"
    assert second.bytes_uploaded < second.bytes_total

    other = make_store("other")  # a different local dir: a fresh executor
    with other.open(0, 1) as part:
        assert snapshot(part) == expected
        assert part.num_keys() == keys
        assert part.get("user-0042") == {"n": 42}
        assert part.get(b"\x00\xffbin", space="blobs") == b"raw"
    restore = other.last_restore
    assert not restore.reused_local and restore.files_downloaded >= 1
    assert restore.bytes_downloaded > 0

    with other.open(0, 1) as part:  # same machine, same version: nothing downloaded
        assert part.get("user-0042") == {"n": 42}
    assert other.last_restore.reused_local and other.last_restore.bytes_downloaded == 0

    with other.open(0, 0) as part:  # an older version is still there
        assert part.get("batch-1", space="meta") is None
        assert part.num_keys() == 3001
    assert other.last_restore.files_downloaded == 0  # its files were already cached

    manifest = writer.read_manifest(0, 1)
    assert manifest.num_keys == keys and manifest.writer["host"]
    assert all(len(f.sha256) == 64 for f in manifest.files)


def test_replayed_batch_starts_from_previous_version_and_yields_the_same_state(
        make_store: Factory) -> None:
    store = make_store()
    with store.open(0, EMPTY_VERSION) as part:
        apply_batch(part, 0)
        part.commit(0)
    # Attempt 1 of batch 1 writes, prepares a candidate and dies before publishing.
    part = store.open(0, 0)
    apply_batch(part, 1)
    part.put("garbage-from-dead-attempt", 1)
    orphan = part.prepare_commit(1)
    part.close()
    # Attempt 2 writes half a batch and crashes without any commit.
    part = store.open(0, 0)
    assert not store.last_restore.reused_local, "a copy at an unpublished candidate is reused"
    apply_batch(part, 1, n=700)
    part.close()
    # The replay: from version 0 again; same input -> same version 1.
    with store.open(0, 0) as part:
        assert not store.last_restore.reused_local, "a dirty local copy must be restored"
        assert part.get("garbage-from-dead-attempt") is None
        apply_batch(part, 1)
        part.commit(1)
        replayed = snapshot(part)
    reference = make_store("reference")
    with reference.open(0, EMPTY_VERSION) as part:
        apply_batch(part, 0)
        apply_batch(part, 1)
        assert snapshot(part) == replayed
    assert store.index.resolve(0, 1) != orphan.manifest_path


def test_zombie_commit_is_refused(make_store: Factory) -> None:
    a, b = make_store("executor-a"), make_store("executor-b")
    with a.open(3, EMPTY_VERSION) as part:
        part.put("x", 0)
        part.commit(0)
    part_a, part_b = a.open(3, 0), b.open(3, 0)
    part_a.put("x", "from-a")
    part_b.put("x", "from-zombie")
    winner = part_a.prepare_commit(1, writer="task-a")
    zombie = part_b.prepare_commit(1, writer="task-b")
    a.publish(winner)
    with pytest.raises(CommitConflictError, match="already committed by another attempt"):
        b.publish(zombie)
    a.publish(winner)  # publishing the same candidate again is idempotent
    part_a.close()
    part_b.close()
    with b.open(3, 1) as part:  # the zombie's machine restores the winner's state
        assert part.get("x") == "from-a"
        assert not b.last_restore.reused_local
    assert read_manifest(*a.filesystem(), a.index.resolve(3, 1)).writer["writer"] == "task-a"
    # Through commit() too: the loser's partition refuses further use.
    part_c = b.open(3, 1)
    part_d = a.open(3, 1)
    part_d.put("x", "d")
    part_d.commit(2)
    part_c.put("x", "c")
    with pytest.raises(CommitConflictError):
        part_c.commit(2)
    with pytest.raises(StateTransactionError):
        part_c.put("x", "after-failure")
    part_c.close()
    part_d.close()


def test_candidate_round_trips_through_json_and_pickle(make_store: Factory) -> None:
    store = make_store()
    with store.open(1, EMPTY_VERSION) as part:
        part.put("k", "v")
        candidate = part.prepare_commit(0, writer="stage-1-task-7")
    assert CommitCandidate.from_json(candidate.to_json()) == candidate
    assert pickle.loads(pickle.dumps(candidate)) == candidate
    shipped = pickle.loads(pickle.dumps(store))  # the store travels to executors
    assert store.index.resolve(1, 0) is None, "prepare alone must publish nothing"
    shipped.publish(candidate)
    with make_store("elsewhere").open(1, 0) as part:
        assert part.get("k") == "v"
    assert store.latest_version(1) == 0 and store.partitions() == [1]


def test_corrupt_or_missing_file_is_refused(make_store: Factory) -> None:
    store = make_store()
    with store.open(0, EMPTY_VERSION) as part:
        part.put_many((f"k{i}", i) for i in range(500))
        part.commit(0)
    fs, root = store.filesystem()
    sst = store.read_manifest(0, 0).sst_entries()[0]
    original = fs.cat_file(f"{root}/{sst.remote}")
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0xFF
    fs.pipe_file(f"{root}/{sst.remote}", bytes(damaged))
    with pytest.raises(CorruptStateError, match="corrupt: expected") as info:
        make_store("fresh-1").open(0, 0)
    assert sst.remote in str(info.value) and "version 0" in str(info.value)
    fs.rm_file(f"{root}/{sst.remote}")
    with pytest.raises(CorruptStateError, match="missing"):
        make_store("fresh-2").open(0, 0)
    with pytest.raises(CorruptStateError):
        make_store("fresh-3").open_read_only(0, 0)
    fs.pipe_file(f"{root}/{sst.remote}", original)  # repaired: loads again
    with make_store("fresh-4").open(0, 0) as part:
        assert part.get("k42") == 42


def test_retention_keeps_last_versions_and_removes_orphans(make_store: Factory) -> None:
    store = make_store()
    part = store.open(0, EMPTY_VERSION)
    for version in range(5):
        part.put_many((f"v{version}-{i}", i) for i in range(300))
        part.delete(f"v{version - 1}-0")
        part.commit(version)
    part.close()
    # An orphan candidate for a decided version, and an in-flight one for a future version.
    with make_store("crashed").open(0, 3) as crashed:
        crashed.put("orphan", 1)
        orphan = crashed.prepare_commit(4)
    with make_store("running").open(0, 4) as running:
        running.put("in-flight", 1)
        in_flight = running.prepare_commit(5)
    fs, root = store.filesystem()
    before = set(fs.find(root))
    deleted = store.cleanup(0, keep_last=2)
    after = set(fs.find(root))
    assert store.index.versions(0) == [3, 4]
    assert deleted["versions"] == 3 and deleted["manifests"] >= 4 and deleted["files"] >= 1
    assert f"{root}/{orphan.manifest_path}" in before - after
    assert f"{root}/{in_flight.manifest_path}" in after, "a future candidate must survive"
    for version in (3, 4):  # retained versions still restore completely on a new machine
        with make_store(f"check-{version}").open(0, version) as part:
            assert part.num_keys() == 300 * (version + 1) - version
    with pytest.raises(StateNotFoundError, match="never committed"):
        make_store("late").open(0, 1)
    referenced = {f"{root}/{e.remote}" for v in (3, 4) for e in store.read_manifest(0, v).files
                  if e.remote}
    ssts = {p for p in after if "/sst/" in p}
    in_flight_files = {f"{root}/{e.remote}" for e in
                       read_manifest(fs, root, in_flight.manifest_path).files if e.remote}
    assert ssts - referenced <= in_flight_files


def test_ttl_expires_only_expired_keys_and_survives_restore(make_store: Factory) -> None:
    store = make_store()
    with store.open(0, EMPTY_VERSION) as part:
        part.put("short", "s", ttl_ms=1_000, now_ms=10_000)
        part.put("long", "l", ttl_ms=100_000, now_ms=10_000)
        part.put("renewed", "r1", ttl_ms=1_000, now_ms=10_000)
        part.put("renewed", "r2", ttl_ms=50_000, now_ms=10_000)
        part.put("pinned", "p1", ttl_ms=1_000, now_ms=10_000)
        part.put("pinned", "p2")  # a put without ttl clears the expiry
        part.put_many([("bulk-a", 1), ("bulk-b", 2)], space="other", ttl_ms=500, now_ms=10_000)
        part.put("forever", "f")
        part.commit(0)
    with make_store("elsewhere").open(0, 0) as part:
        assert part.get("short") == "s", "expired keys stay readable until expire() runs"
        expired = sorted(part.expire(now_ms=11_000))
        assert expired == [("default", b"short", "s"), ("other", b"bulk-a", 1),
                           ("other", b"bulk-b", 2)]
        assert part.get("short") is None and part.get("renewed") == "r2"
        assert part.get("pinned") == "p2"
        assert list(part.expire(now_ms=11_000)) == []
        assert [k for _, k, _ in part.expire(now_ms=70_000)] == [b"renewed"]
        assert part.num_keys() == 3  # long, pinned, forever
        part.commit(1)
    with store.open(0, 1) as part:
        assert [k for _, k, _ in part.expire(now_ms=10**9)] == [b"long"]
        assert sorted(k for k, _ in part.items()) == [b"forever", b"pinned"]


def test_reads_scans_and_counts(make_store: Factory) -> None:
    store = make_store(space_codecs={"json": JsonCodec()})
    with store.open(0, EMPTY_VERSION) as part:
        part.put_many((f"a{i:03d}", i) for i in range(100))
        part.put_many((f"b{i:03d}", -i) for i in range(10))
        part.put("a005", "over")  # overwrite does not change the count
        part.delete("a006")
        part.delete("missing")
        part.put(b"\xff\xff", 1)
        part.put("doc", {"x": [1, 2]}, space="json")
        assert part.num_keys() == 111 and part.num_keys(space="json") == 1
        assert part.multi_get(["a001", "zzz", "a005"], default="-") == [1, "-", "over"]
        assert [k for k, _ in part.range("a097", "b001")] == [b"a097", b"a098", b"a099",
                                                              b"b000"]
        assert [k for k, _ in part.range("a097", "b001", reverse=True)] == [
            b"b000", b"a099", b"a098", b"a097"]
        assert [k for k, _ in part.prefix("b00")][:3] == [b"b000", b"b001", b"b002"]
        assert len(list(part.prefix("a00"))) == 9  # a006 deleted
        assert list(part.prefix(b"\xff")) == [(b"\xff\xff", 1)]
        assert part.contains("a001") and not part.contains("a006")
        assert part.get("nothing", space="nospace", default=0) == 0
        assert part.spaces() == ["default", "json"]
        metrics = part.commit(0)
    assert metrics.num_keys == 111 and metrics.puts == 113 and metrics.deletes == 2
    fs, root = store.filesystem()
    raw = fs.cat_file(f"{root}/{metrics.manifest_path}")
    assert b'"json"' in raw and b'"pickle"' in raw  # codecs are recorded per space


def test_misuse_gets_clear_errors(make_store: Factory) -> None:
    store = make_store(lock_timeout_s=0)
    part = store.open(0, EMPTY_VERSION)
    with pytest.raises(StateLockedError, match="one process at a time"):
        store.open(0, EMPTY_VERSION)
    with pytest.raises(StateTransactionError, match="greater than"):
        part.prepare_commit(-1)
    part.put("k", 1)
    part.prepare_commit(0)
    with pytest.raises(StateTransactionError, match="prepared"):
        part.put("k", 2)
    part.close()
    with pytest.raises(StateNotFoundError, match="version 0 of partition 0 was never"):
        store.open(0, 0)
    with pytest.raises(OptionError, match="space name"):
        with store.open(0, EMPTY_VERSION) as p:
            p.put("k", 1, space="bad/name")
    with pytest.raises(OptionError, match="block_cache_bytes"):
        make_store(block_cache_bytes=0)
    with store.open(0, EMPTY_VERSION) as p:
        p.put("k", 1)
        p.commit(0)
    with store.open_read_only(0) as ro:
        assert ro.get("k") == 1
        with pytest.raises(StateTransactionError, match="read-only"):
            ro.put("k", 2)


def test_exact_counts_stay_exact_on_every_write_path(make_store: Factory,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """get->put (no second read), blind put, delete, put_many with duplicates, multi_get,
    contains and expire all keep ``num_keys`` equal to the keys stored, also once the presence
    memo is cleared (made tiny here) and after a restore elsewhere."""
    monkeypatch.setattr(db_mod, "_MEMO_MAX", 8)
    store = make_store()
    with store.open(0, EMPTY_VERSION) as part:
        part.put_many([("a", 1), ("b", 2), ("a", 3)])  # a duplicate in one batch
        assert part.get("zz") is None
        part.put("zz", 1)  # get (absent) -> put: new
        assert part.get("a") == 3
        part.put("a", 4)  # get (present) -> put: not new
        part.put("b", 5)  # blind overwrite
        part.put("c", 6)  # blind new
        part.delete("c")
        part.delete("c")  # already gone
        part.delete("never")
        for i in range(20):  # fills and clears the memo with absent keys
            assert part.get(f"m{i}") is None
        part.put_many((f"m{i}", i) for i in range(20))
        part.put_many((f"m{i}", -i) for i in range(10, 30))  # half overwrites
        assert part.multi_get(["a", "q"]) == [4, None]
        part.put_many([("q", 1), ("a", 0), ("q", 2)])
        assert part.contains("q")
        part.delete("q")
        part.put("t", 1, ttl_ms=5, now_ms=0)
        assert [k for _, k, _ in part.expire(now_ms=10)] == [b"t"]
        part.put("t", 2)  # back after expiry
        part.put("x", 1, space="other")
        part.put("x", 2, space="other")
        stored = {s: len(list(part.items(space=s))) for s in part.spaces()}
        assert stored == {"default": 34, "other": 1}  # a, b, zz, t, m0..m29
        assert part.num_keys() == 35 and part.num_keys(space="other") == 1
        assert part.commit(0).num_keys == 35
    with make_store("elsewhere").open(0, 0) as part:
        assert part.num_keys() == 35 and part.num_keys(space="default") == 34


def test_writes_after_commit_mark_the_copy_dirty_and_prepared_refuses_all_writes(
        make_store: Factory) -> None:
    store = make_store()
    part = store.open(0, EMPTY_VERSION)
    part.put("k", 1)
    part.commit(0)
    part.put("k", 2)  # a write after commit must mark the local copy dirty again ...
    part.close()
    with store.open(0, 0) as again:  # ... so the uncommitted write is not reused
        assert again.get("k") == 1
        assert not store.last_restore.reused_local
        again.put("k", 3)
        again.prepare_commit(1)
        for write in (lambda: again.put("k", 4), lambda: again.put_many([("k", 4)]),
                      lambda: again.delete("k"), lambda: again.put("new", 1, space="s2")):
            with pytest.raises(StateTransactionError, match="prepared"):
                write()
        assert again.get("k") == 3  # reads still work on a prepared partition
    with pytest.raises(StateTransactionError, match="closed"):
        again.get("k")


def test_memory_options_are_validated() -> None:
    opts = StateStoreOptions(block_cache_bytes=256 << 20, memtable_budget_bytes=128 << 20,
                             write_buffer_bytes=64 << 20)
    assert opts.memory_bound_bytes == 384 << 20
    with pytest.raises(OptionError, match="write_buffer_bytes=.* memtable_budget_bytes"):
        StateStoreOptions(write_buffer_bytes=128 << 20, memtable_budget_bytes=64 << 20)
    with pytest.raises(OptionError, match="memtables are charged to the block cache"):
        StateStoreOptions(memtable_budget_bytes=128 << 20, block_cache_bytes=64 << 20)
    with pytest.raises(OptionError, match="max_write_buffers"):
        StateStoreOptions.from_strings({"max_write_buffers": "0"})
    assert StateStoreOptions.from_strings({"BLOCK_CACHE_BYTES": str(1 << 30)}
                                          ).block_cache_bytes == 1 << 30


def test_reopening_a_partition_keeps_few_rocksdb_info_logs(make_store: Factory) -> None:
    """The ordered stage opens each partition once per batch: RocksDB's info logs of earlier
    opens must not pile up in the local copy (its default keeps 1,000)."""
    import os

    store = make_store("logs")
    version = EMPTY_VERSION
    for batch in range(8):
        with store.open(0, version) as part:
            part.put(f"k{batch}", batch)
            part.commit(batch)
        version = batch
    db_dir = store.local_copy_dir(0)
    dbs = [d for d in os.listdir(db_dir) if d.startswith("db-")]
    assert len(dbs) == 1
    logs = [n for n in os.listdir(os.path.join(db_dir, dbs[0])) if n.startswith("LOG")]
    assert "LOG" in logs and 1 <= len(logs) <= 3, logs


def test_a_partition_opens_its_files_on_the_opening_thread(make_store: Factory) -> None:
    """RocksDB's default starts up to 16 threads per column family at every open to load table
    readers; the store asks for one (docs/decisions/0024-rocksdb-one-file-opening-thread.md).
    Read back from the options RocksDB itself logged at the latest open."""
    import os

    store = make_store("opening")
    with store.open(0, EMPTY_VERSION) as part:
        part.put("k", 1)
        part.commit(0)
    with store.open(0, 0) as part:
        assert part.get("k") == 1
    db_dir = store.local_copy_dir(0)
    (db,) = [d for d in os.listdir(db_dir) if d.startswith("db-")]
    with open(os.path.join(db_dir, db, "LOG")) as handle:
        logged = [line.split(":")[-1].strip() for line in handle
                  if "Options.max_file_opening_threads" in line]
    assert logged and set(logged) == {"1"}, logged


def test_small_commits_of_new_keys_do_not_pile_up_files(make_store: Factory) -> None:
    """Each commit flushes a small file; RocksDB moves one whose keys overlap no other file's
    to the last level as it is, and leveled compaction never merges those. The commit merges
    a space's files once they are many and small, so a long run of small batches keeps its
    opens, checkpoints and manifests small; the state stays whole, also after a restore."""
    from orderedstream.statestore.rocksdb.committer import _FRAGMENTS

    store = make_store("fragments")
    versions = _FRAGMENTS + 8
    version = EMPTY_VERSION
    for batch in range(versions):
        with store.open(0, version) as part:
            part.put(f"session-{batch:05d}", batch)  # a new, increasing key per commit
            part.commit(batch)
        version = batch
    files = len(store.read_manifest(0, version).files)
    assert files < versions // 2, files  # without merging: a file per commit and space
    fresh = make_store("another-machine")
    with fresh.open(0, version) as part:
        assert fresh.last_restore is not None and not fresh.last_restore.reused_local
        assert [part.get(f"session-{b:05d}") for b in range(versions)] == list(range(versions))

