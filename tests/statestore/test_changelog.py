"""Changelog snapshots (``StateStoreOptions(changelog=True)``) against real storage.

Every test runs on file:// and on SeaweedFS S3 (``make_store``). The state after each version
is checked against a plain dict that saw the same writes, on a machine that restores it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from orderedstream.core.errors import CorruptStateError, OptionError, StateValueError
from orderedstream.statestore import EMPTY_VERSION, StateStoreOptions
from orderedstream.statestore.rocksdb.store import RocksDBStateStore

Factory = Callable[..., RocksDBStateStore]
CHANGELOG = {"changelog": True, "snapshot_interval": 3}


def write_version(part, version: int, expected: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    """Rewrite 50 of 5,000 keys, delete one, add one with a TTL and one in another space."""
    part.put_many((f"k{(version * 50 + i) % 5000:05d}", {"v": version, "i": i})
                   for i in range(50))
    expected.update({f"k{(version * 50 + i) % 5000:05d}": {"v": version, "i": i}
                     for i in range(50)})
    part.delete(f"k{version:05d}")
    expected.pop(f"k{version:05d}", None)
    part.put(f"ttl-{version}", version, ttl_ms=3_600_000)
    expected[f"ttl-{version}"] = version
    part.put(f"meta-{version}", version, space="meta")


def state_of(part) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {k.decode(): v for k, v in part.range()}


@pytest.mark.parametrize("inline", [16 << 10, 0], ids=["inlined-logs", "uploaded-logs"])
def test_changelog_versions_restore_exactly_and_upload_only_what_changed(
        make_store: Factory, inline: int) -> None:
    store = make_store("writer", **CHANGELOG, changelog_inline_bytes=inline)
    expected: dict[str, object] = {}
    part = store.open(0, EMPTY_VERSION)
    part.put_many((f"k{i:05d}", {"v": -1, "i": i}) for i in range(5000))
    expected.update({f"k{i:05d}": {"v": -1, "i": i} for i in range(5000)})
    states, metrics = [], []
    for version in range(7):
        write_version(part, version, expected)
        metrics.append(part.commit(version))
        states.append(dict(expected))
    part.close()
    # A lineage starts with a checkpoint; then one every 3 versions, logs in between.
    assert [m.changelog for m in metrics] == [False, True, True, False, True, True, False]
    chains = [len(store.read_manifest(0, v).changelog) for v in range(7)]
    assert chains == [0, 1, 2, 0, 1, 2, 0]
    # Older readers refuse these manifests (chains, bare values, inlined logs) by number, not
    # as garbage; without inlined logs the versions before them read the manifests.
    formats = [store.read_manifest(0, v).format for v in range(3)]
    assert formats == ([3, 4, 4] if inline else [3, 3, 3])
    for m in metrics[1:3] + metrics[4:6]:
        # 50 rewritten values + a delete + 2 puts + key counts: a few KB, not the whole state.
        # Inlined, the log goes up inside the manifest: no object of its own.
        assert m.files_uploaded == (0 if inline else 1), m
        assert m.bytes_uploaded < 8_000 < m.bytes_total, m
    chain = store.read_manifest(0, 5).changelog
    assert [e.inline is not None for e in chain] == [bool(inline)] * 2
    fs, root = store.filesystem()
    logs = [p for p in fs.find(f"{root}/p=0") if "-changelog-" in p]
    assert len(logs) == (0 if inline else 4), logs
    for version in range(7):
        with make_store(f"reader-{version}", **CHANGELOG).open(0, version) as restored:
            assert state_of(restored) == states[version]
            assert restored.get(f"meta-{version}", space="meta") == version
            assert restored.num_keys(space="default") == len(states[version])
        with make_store(f"ro-{version}").open_read_only(0, version) as read_only:
            assert state_of(read_only) == states[version]


def test_changelog_chain_continues_after_restore_and_replays_a_crashed_batch(
        make_store: Factory) -> None:
    expected: dict[str, object] = {}
    with make_store("a", **CHANGELOG).open(0, EMPTY_VERSION) as part:
        write_version(part, 0, expected)
        part.commit(0)
    at_0 = dict(expected)
    # Machine b restores version 0 (a checkpoint) and continues the lineage with a log.
    with make_store("b", **CHANGELOG).open(0, 0) as part:
        write_version(part, 1, expected)
        assert part.commit(1).changelog
        write_version(part, 99, {})  # a batch that crashes before its commit
    # The uncommitted writes made b's copy dirty: reopening version 1 restores it exactly.
    b = make_store("b", **CHANGELOG)
    with b.open(0, 1) as part:
        assert state_of(part) == expected
        assert "k00099" in state_of(part)
        assert not b.last_restore.reused_local
        assert not [n for n in os.listdir(b.local_copy_dir(0)) if n.startswith("changelog-")]
    with make_store("c", **CHANGELOG).open(0, 0) as part:
        assert state_of(part) == at_0
    assert len(make_store("d").read_manifest(0, 1).changelog) == 1


def test_a_failed_put_many_leaves_the_log_like_the_db(make_store: Factory) -> None:
    """Items of a chunk that never reached the DB (an item raised) must not reach the log."""
    with make_store("a", **CHANGELOG).open(0, EMPTY_VERSION) as part:
        part.put("a", 1)
        part.commit(0)

        def items():  # type: ignore[no-untyped-def]
            yield "x", 1
            yield "y", 2
            raise RuntimeError("source failed")

        with pytest.raises(RuntimeError):
            part.put_many(items())
        with pytest.raises(StateValueError):
            part.put_many([("z", 3), (42, 4)], ttl_ms=60_000)  # a bad key mid-chunk
        part.put_many([("b", 2)])
        assert part.commit(1).changelog
        live = state_of(part)
    with make_store("b", **CHANGELOG).open(0, 1) as restored:
        assert state_of(restored) == live == {"a": 1, "b": 2}
        assert restored.num_keys() == 2


def test_corrupt_changelog_is_refused_and_retention_keeps_the_chain(make_store: Factory) -> None:
    store = make_store("writer", **CHANGELOG, changelog_inline_bytes=0)
    expected: dict[str, object] = {}
    with store.open(0, EMPTY_VERSION) as part:
        for version in range(6):
            write_version(part, version, expected)
            part.commit(version)
    # Version 5 = checkpoint of version 3 + logs of 4 and 5: retention must keep all of them.
    deleted = store.cleanup(0, keep_last=1)
    assert deleted["versions"] == 5 and deleted["files"] >= 1
    assert len(store.read_manifest(0, 5).changelog) == 2
    with make_store("after-cleanup").open(0, 5) as part:
        assert state_of(part) == expected
    fs, root = store.filesystem()
    log = store.read_manifest(0, 5).changelog[-1]
    original = fs.cat_file(f"{root}/{log.remote}")
    fs.pipe_file(f"{root}/{log.remote}", original[:-3] + b"xyz")
    with pytest.raises(CorruptStateError, match="corrupt: expected") as info:
        make_store("fresh").open(0, 5)
    assert log.remote in str(info.value)


def test_inlined_and_uploaded_logs_mix_in_a_chain_and_a_damaged_inline_log_is_refused(
        make_store: Factory) -> None:
    """Logs over ``changelog_inline_bytes``, or past 4x it inlined in the chain, go up as
    objects; the chain restores either way, retention keeps the uploaded ones, and an inlined
    log whose bytes do not match its checksum is refused like a damaged object."""
    options = {"changelog": True, "snapshot_interval": 20, "changelog_inline_bytes": 1200}
    store = make_store("writer", **options)
    expected: dict[str, object] = {}
    # keys written per version, 40 random bytes each: 10 keys a ~0.6 KB log, 60 keys ~3 KB
    sizes = [0, 10, 10, 60, *[10] * 10]
    with store.open(0, EMPTY_VERSION) as part:
        for version, count in enumerate(sizes):
            values = {f"v{version}-{i}": os.urandom(40) for i in range(count)}
            part.put_many(values.items())
            expected.update(values)
            part.commit(version)
    last = len(sizes) - 1
    chain = store.read_manifest(0, last).changelog
    assert len(chain) == last
    big = [e for e in chain if e.size > 1200]
    assert big and all(e.remote is not None for e in big), chain
    inlined = [e for e in chain if e.inline is not None]
    assert inlined and sum(e.size for e in inlined) <= 4 * 1200, chain
    # past 4x the limit inlined, small logs go up too
    assert [e for e in chain if e.size <= 1200 and e.remote is not None], chain
    assert store.read_manifest(0, last).format == 4
    store.cleanup(0, keep_last=1)
    with make_store("reader", **options).open(0, last) as restored:
        assert state_of(restored) == expected
    # Damage the last inlined log in its manifest (valid base64, other bytes).
    import base64
    import json

    fs, root = store.filesystem()
    rel = store._resolve(0, last)
    data = json.loads(fs.cat_file(f"{root}/{rel}"))
    damaged = next(e for e in reversed(data["changelog"]) if "inline" in e)
    content = base64.b64decode(damaged["inline"])
    damaged["inline"] = base64.b64encode(content[:-1] + bytes([content[-1] ^ 1])).decode()
    fs.pipe_file(f"{root}/{rel}", json.dumps(data).encode())
    with pytest.raises(CorruptStateError, match="inlined in state version .* is corrupt") as info:
        make_store("fresh", **options).open(0, last)
    assert damaged["name"] in str(info.value) and store.location.url in str(info.value)


def test_changelog_options_are_validated() -> None:
    with pytest.raises(OptionError, match="snapshot_interval=0"):
        StateStoreOptions(changelog=True, snapshot_interval=0)
    with pytest.raises(OptionError, match="changelog='yes'"):
        StateStoreOptions(changelog="yes")  # type: ignore[arg-type]
    for bad in (-1, 2 << 20, True):
        with pytest.raises(OptionError, match="changelog_inline_bytes=.*from 0"):
            StateStoreOptions(changelog=True, changelog_inline_bytes=bad)
    parsed = StateStoreOptions.from_strings({"Changelog": "true", "snapshot_interval": "4",
                                             "changelog_inline_bytes": "0"})
    assert parsed.changelog and parsed.snapshot_interval == 4
    assert parsed.changelog_inline_bytes == 0


def test_damaged_write_logs_are_refused_by_replay(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Replay's own checks (behind the checksum): a cut record, a foreign file."""
    import pyarrow as pa
    import rocksdict

    from orderedstream.statestore.rocksdb.changelog import ChangelogWriter, replay

    log = ChangelogWriter(str(tmp_path / "v1.log"))
    for i in range(1000):
        log.put("default", b"k%04d" % i, b"\x00value-%d" % i)
    log.delete("default", b"k0001")
    log.close()
    db = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    family = lambda name: (db.get_column_family_handle(name), db)  # noqa: E731
    assert replay(db, log.path, family) == 1001
    assert db[b"k0999"] == b"\x00value-999" and db.get(b"k0001") is None
    with pa.input_stream(log.path, compression="zstd") as stream:
        content = stream.read()
    with pa.output_stream(str(tmp_path / "cut.log"), compression="zstd") as out:
        out.write(content[:-3])
    with pytest.raises(CorruptStateError, match="truncated"):
        replay(db, str(tmp_path / "cut.log"), family)
    (tmp_path / "foreign.log").write_bytes(b"not a write log at all")
    with pytest.raises(CorruptStateError, match="cannot be decompressed|does not start"):
        replay(db, str(tmp_path / "foreign.log"), family)
    db.close()


def test_a_reused_copy_names_its_checkpoint_without_reading_the_parent_manifest(
        make_store: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local copy records its checkpoint's files (``state.json``): a changelog version
    opened from it writes its manifest without one more read of storage. A copy written
    before that record existed still works: it reads the parent manifest instead."""
    import json

    from orderedstream.statestore.rocksdb import committer

    reads: list[str] = []
    real = committer.read_manifest

    def counted(fs, root, rel):  # type: ignore[no-untyped-def]
        reads.append(rel)
        return real(fs, root, rel)

    monkeypatch.setattr(committer, "read_manifest", counted)
    store = make_store("w", changelog=True, snapshot_interval=10)
    expected: dict[str, object] = {}
    for version in range(4):  # each version opened anew from the local copy, as a batch does
        with store.open(0, version - 1 if version else EMPTY_VERSION) as part:
            write_version(part, version, expected)
            assert part.commit(version).changelog == (version > 0)
            assert store.last_restore is not None
            assert store.last_restore.reused_local == (version > 0)
    assert reads == []
    files = [store.read_manifest(0, v).files for v in range(4)]
    assert files[1] == files[2] == files[3] == files[0] and files[0]
    # A copy from before the record: the parent manifest is read, the result is the same.
    state_json = os.path.join(store.local_copy_dir(0), "state.json")
    with open(state_json) as handle:
        data = json.load(handle)
    assert [e["name"] for e in data["checkpoint"]] == [f.name for f in files[0]]
    del data["checkpoint"]
    with open(state_json, "w") as handle:
        json.dump(data, handle)
    with store.open(0, 3) as part:
        write_version(part, 4, expected)
        assert part.commit(4).changelog
    assert len(reads) == 1 and store.read_manifest(0, 4).files == files[0]
    with make_store("reader", changelog=True, snapshot_interval=10).open(0, 4) as restored:
        assert state_of(restored) == expected
