"""Partitions kept open between uses (``StateStoreOptions.keep_open``,
``statestore.rocksdb.keepopen``): reused in the process that closed them, closed on request of
another process that opens them, never reused at another version or after a change."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orderedstream.core import tuning
from orderedstream.core.errors import StateLockedError, StateTransactionError
from orderedstream.statestore import EMPTY_VERSION
from orderedstream.statestore.rocksdb import keepopen
from orderedstream.statestore.rocksdb.store import RocksDBStateStore

Factory = Callable[..., RocksDBStateStore]

_OTHER = """
import json, pickle, sys
store = pickle.load(open(sys.argv[1], "rb"))
partition, version, key = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
part = store.open(partition, version)
seen = part.get(key)
part.put(key, f"{seen}+other")
part.commit(version + 1)
part.close()
print(json.dumps({"seen": seen, "kept_open": store.last_restore.kept_open}), flush=True)
sys.stdin.readline()  # keeps the partition open until told to exit
"""


@pytest.fixture(autouse=True)
def _nothing_kept_between_tests() -> Iterator[None]:
    keepopen.close_all()
    yield
    keepopen.close_all()


def _commit(store: RocksDBStateStore, partition: int, version: int, key: str,
            value: str) -> None:
    with store.open(partition, version) as part:
        part.put(key, value)
        part.commit(version + 1 if version != EMPTY_VERSION else 0)


def _other_process(store: RocksDBStateStore, tmp_path: Path, partition: int, version: int,
                   key: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """A second Python process that opens the partition at ``version``, appends to ``key``,
    commits ``version + 1``, closes it (so keeps it open) and waits for a line on stdin."""
    pickled = tmp_path / "store.pickle"
    pickled.write_bytes(pickle.dumps(store))
    proc = subprocess.Popen([sys.executable, "-c", _OTHER, str(pickled), str(partition),
                             str(version), key], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        assert proc.stderr is not None
        pytest.fail(f"the other process failed: {proc.stderr.read()[-2000:]}")
    return proc, json.loads(line)


def _commit_keys_and_timed(store: RocksDBStateStore, count: int) -> None:
    """Version 0 of partition 0: keys ``k0``.. and, in space ``timed``, ``t0``.. already
    expired (``ttl_ms=0`` at time 0), ``count`` of each."""
    with store.open(0, EMPTY_VERSION) as part:
        for i in range(count):
            part.put(f"k{i}", i)
            part.put(f"t{i}", i, space="timed", ttl_ms=0, now_ms=0)
        part.commit(0)


def _marker(store: RocksDBStateStore, partition: int) -> Path:
    return Path(store.local_copy_dir(partition)) / keepopen.MARKER


def test_a_closed_partition_is_reused_open_at_the_version_it_holds(make_store: Factory) -> None:
    store = make_store()
    _commit(store, 0, EMPTY_VERSION, "k", "v0")
    assert _marker(store, 0).read_text().split()[0] == str(os.getpid())
    for version in (0, 1):
        with store.open(0, version) as part:
            assert store.last_restore is not None and store.last_restore.kept_open
            assert part.get("k") == f"v{version}"
            part.put("k", f"v{version + 1}")
            part.commit(version + 1)
    assert _marker(store, 0).read_text().split()[0] == str(os.getpid())
    # An older version: the kept DB (at version 2) is closed and the copy restored.
    with store.open(0, 1) as part:
        assert store.last_restore is not None
        assert not store.last_restore.kept_open and not store.last_restore.reused_local
        assert part.get("k") == "v1"
    # Written, then closed without a commit: the copy is dirty, nothing is kept.
    part = store.open(0, 1)
    part.put("k", "never committed")
    part.close()
    with store.open(0, 1) as part:
        assert store.last_restore is not None and not store.last_restore.kept_open
        assert part.get("k") == "v1"


def test_without_the_process_tuning_close_closes(make_store: Factory,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tuning.ENV, raising=False)  # a plain session's worker
    store = make_store()
    _commit(store, 0, EMPTY_VERSION, "k", "v0")
    assert not _marker(store, 0).exists()
    with store.open(0, 0) as part:
        assert store.last_restore is not None and not store.last_restore.kept_open
        assert part.get("k") == "v0"


def test_keep_open_zero_closes_at_once_and_the_limit_closes_the_oldest(
        make_store: Factory) -> None:
    store = make_store(keep_open=0)
    _commit(store, 0, EMPTY_VERSION, "k", "v0")
    assert not _marker(store, 0).exists()
    with store.open(0, 0):
        assert store.last_restore is not None and not store.last_restore.kept_open
    two = make_store("m1", keep_open=2)
    for partition in (10, 11, 12):
        _commit(two, partition, EMPTY_VERSION, "k", f"p{partition}")
    kept = {}
    for partition in (12, 11, 10):  # partition 10 was closed when partition 12 was kept
        with two.open(partition, 0) as part:
            assert part.get("k") == f"p{partition}"
            assert two.last_restore is not None
            kept[partition] = two.last_restore.kept_open
    assert kept == {12: True, 11: True, 10: False}


def test_another_process_has_a_kept_partition_closed_and_keeps_it_itself(
        make_store: Factory, tmp_path: Path) -> None:
    store = make_store()
    _commit(store, 3, EMPTY_VERSION, "k", "mine")
    proc, got = _other_process(store, tmp_path, 3, 0, "k")
    try:
        assert got == {"seen": "mine", "kept_open": False}
        assert keepopen.take(store.local_copy_dir(3)) is None  # closed here on its request
        assert _marker(store, 3).read_text().split()[0] == str(proc.pid)
        # The other process, alive, keeps version 1 open: it closes it on this open's request.
        with store.open(3, 1) as part:
            assert store.last_restore is not None
            assert store.last_restore.reused_local and not store.last_restore.kept_open
            assert part.get("k") == "mine+other"
            part.put("k", "third")
            part.commit(2)
        assert proc.poll() is None, "the keeper was asked, not killed"
    finally:
        proc.communicate("exit\n", timeout=30)
    with store.open(3, 2) as part:
        assert part.get("k") == "third" and store.last_restore.kept_open


def test_a_killed_keeper_leaves_the_copy_usable(make_store: Factory, tmp_path: Path) -> None:
    store = make_store()
    _commit(store, 0, EMPTY_VERSION, "k", "a")
    proc, _ = _other_process(store, tmp_path, 0, 0, "k")
    proc.kill()
    proc.communicate(timeout=30)
    with store.open(0, 1) as part:
        assert store.last_restore is not None and store.last_restore.reused_local
        assert part.get("k") == "a+other"


def test_a_keeper_that_does_not_answer_is_named_in_the_error(
        make_store: Factory, tmp_path: Path) -> None:
    store = make_store(lock_timeout_s=1.0)
    _commit(store, 0, EMPTY_VERSION, "k", "a")
    proc, _ = _other_process(store, tmp_path, 0, 0, "k")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(StateLockedError) as err:
            store.open(0, 1)
        message = str(err.value)
        assert f"process {proc.pid} keeps its local state copy" in message
        assert store.local_copy_dir(0) in message and "lock_timeout_s" in message
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.communicate("exit\n", timeout=30)
    with store.open(0, 1) as part:  # once it answers, or is gone, the copy opens
        assert part.get("k") == "a+other"


def test_a_partition_whose_copy_was_deleted_is_closed_not_kept(make_store: Factory) -> None:
    store = make_store()
    _commit(store, 0, EMPTY_VERSION, "k", "a")
    part = store.open(0, 0)
    assert store.last_restore is not None and store.last_restore.kept_open
    shutil.rmtree(store.local_copy_dir(0))  # what an operator clearing local_dir does
    part.close()  # closes: nothing names a DB kept in a deleted folder
    assert keepopen.take(store.local_copy_dir(0)) is None
    with store.open(0, 0) as part:
        assert store.last_restore is not None and not store.last_restore.reused_local
        assert part.get("k") == "a"


def test_a_kept_file_of_an_ended_keeper_does_not_hold_the_open(make_store: Factory) -> None:
    """``KEPT`` naming a pid that now belongs to a process started after the file was written
    (the keeper ended, its pid reused): the open goes on at once, without asking anyone."""
    store = make_store(lock_timeout_s=30.0)
    _commit(store, 0, EMPTY_VERSION, "k", "a")
    keepopen.close_all()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        marker = _marker(store, 0)
        marker.write_text(f"{stranger.pid} orderedstream-state-gone\n{marker.parent}\n")
        os.utime(marker, (0, 0))  # written long before the stranger started
        with store.open(0, 0) as part:
            assert part.get("k") == "a"
        assert _marker(store, 0).read_text().split()[0] == str(os.getpid())  # kept here now
    finally:
        stranger.kill()
        stranger.wait(30)


def test_close_under_closes_the_copies_of_a_folder(make_store: Factory) -> None:
    store = make_store()
    for partition in (0, 1):
        _commit(store, partition, EMPTY_VERSION, "k", "a")
    local = store.options.resolved_local_dir()
    keepopen.close_under(local)
    assert keepopen.take(store.local_copy_dir(0)) is None
    assert keepopen.take(store.local_copy_dir(1)) is None


def test_an_iterator_resumed_after_close_fails_instead_of_reaching_a_reused_db(
        make_store: Factory) -> None:
    """A ``range``/``raw_items`` generator left suspended when its partition closed must not
    go on in the DB that close kept open, now another holder's; nor an ``expire``."""
    store = make_store()
    _commit_keys_and_timed(store, 4)
    part = store.open(0, 0)
    ranged, raw, backwards = part.range(), part.raw_items(), part.range(reverse=True)
    assert next(ranged) == (b"k0", 0)
    assert next(raw)[0] == b"k0"
    assert next(backwards) == (b"k3", 3)
    part.close()
    again = store.open(0, 0)  # takes the DB the close above kept open
    assert store.last_restore is not None and store.last_restore.kept_open
    for gen in (ranged, raw, backwards):
        with pytest.raises(StateTransactionError, match="is closed"):
            next(gen)
    expiring = again.expire(now_ms=10)
    assert next(expiring)[:2] == ("timed", b"t0")
    again.close()  # written: the DB is closed, not kept
    with pytest.raises(StateTransactionError, match="is closed"):
        next(expiring)
    with store.open(0, 0) as part:
        assert [k for k, _ in part.range(space="timed")] == [b"t0", b"t1", b"t2", b"t3"]
        assert part.get("k3") == 3


def test_an_expire_resumed_after_prepare_commit_writes_nothing(make_store: Factory) -> None:
    store = make_store()
    with store.open(0, EMPTY_VERSION) as part:
        for i in range(3):
            part.put(f"t{i}", i, space="timed", ttl_ms=0, now_ms=0)
        part.commit(0)
    with store.open(0, 0) as part:
        expiring = part.expire(now_ms=10)
        assert next(expiring)[1] == b"t0"
        part.prepare_commit(1)
        with pytest.raises(StateTransactionError, match="is prepared"):
            next(expiring)
    # One resumed after a commit writes the next version, logged like any write: another
    # machine restores version 2 from its changelog without t1.
    logged = make_store(changelog=True)
    with logged.open(0, 0) as part:
        expiring = part.expire(now_ms=10)
        assert next(expiring)[1] == b"t0"
        part.commit(1)
        assert next(expiring)[1] == b"t1"
        part.commit(2)
    other = make_store("m1", changelog=True)
    for version, keys in ((1, [b"t1", b"t2"]), (2, [b"t2"])):
        with other.open(0, version) as part:
            assert other.last_restore is not None and not other.last_restore.reused_local
            assert [k for k, _ in part.range(space="timed")] == keys


_PROBE_LOCK = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("held")
    else:
        print("free")
"""


def _lock_state(db_path: str) -> str:
    """Whether another process could take RocksDB's LOCK of ``db_path`` now."""
    out = subprocess.run([sys.executable, "-c", _PROBE_LOCK, os.path.join(db_path, "LOCK")],
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


def test_a_suspended_iterator_does_not_keep_the_db_open_after_close(
        make_store: Factory) -> None:
    """rocksdict keeps a DB open (and its LOCK taken) while any iterator over it lives, so a
    ``range``/``prefix``/``raw_items``/``expire`` generator left suspended at ``close``
    would hold the partition's DB until it is garbage collected: the next open of the copy
    failed on RocksDB's lock. ``close`` cuts such iterators off."""
    store = make_store(keep_open=0)
    _commit_keys_and_timed(store, 3)
    part = store.open(0, 0)
    db_path = part._db_path
    suspended = [part.range(), part.range(reverse=True), part.prefix("k"), part.raw_items(),
                 part.range(space="timed")]
    for gen in suspended:
        next(gen)
    assert _lock_state(db_path) == "held"
    part.close()  # clean: the next open reuses this copy's DB folder
    assert _lock_state(db_path) == "free"
    with store.open(0, 0) as again:
        assert store.last_restore is not None and store.last_restore.reused_local
        assert again.get("k2") == 2
    for gen in suspended:
        with pytest.raises(StateTransactionError, match="is closed"):
            next(gen)
    part = store.open(0, 0)
    db_path = part._db_path
    expiring = part.expire(now_ms=10)
    assert next(expiring)[1] == b"t0"
    part.close()  # written, never committed: the DB is closed, the copy restored next time
    assert _lock_state(db_path) == "free"
    with pytest.raises(StateTransactionError, match="is closed"):
        next(expiring)
    # Kept open at close (keep_open > 0): the keeper holds the DB, not the suspended scans;
    # once it closes it, RocksDB's lock is free.
    keeping = make_store("m1")
    _commit(keeping, 1, EMPTY_VERSION, "k", "v")
    part = keeping.open(1, 0)
    db_path = part._db_path
    ranged, backwards = part.range(), part.range(reverse=True)
    next(ranged), next(backwards)
    part.close()
    assert _lock_state(db_path) == "held"  # the keeper's
    keepopen.close_all()
    assert _lock_state(db_path) == "free"
    for gen in (ranged, backwards):
        with pytest.raises(StateTransactionError, match="is closed"):
            next(gen)
