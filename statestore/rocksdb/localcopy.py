"""The local copy of one (location, partition): a locked directory holding the live RocksDB,
a cache of downloaded/uploaded SST files, and ``state.json`` saying which version it holds.

``<local_dir>/<location key>/p=<P>/``: ``LOCK`` (fcntl, one process at a time), ``state.json``
(version, manifest, dirty flag, db dir name, SST entries of the lineage), ``cache/``, ``db-*``.
``dirty`` is set before the first write after a commit; a dirty copy is never reused.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orderedstream.core.errors import InvariantError, StateLockedError
from orderedstream.statestore.base import EMPTY_VERSION
from orderedstream.statestore.manifest import FileEntry


@dataclass
class CopyState:
    """What a local copy holds, as ``state.json`` records it: the version and its manifest,
    whether the DB may differ from it (``dirty``), the DB directory's name, and the files of
    its lineage."""

    version: int = EMPTY_VERSION
    manifest: str | None = None
    dirty: bool = True
    db: str | None = None
    files: dict[str, FileEntry] = field(default_factory=dict)
    """local SST name -> its remote entry, for the lineage of the current DB."""
    changelog: list[FileEntry] = field(default_factory=list)
    """Changelogs (changelog mode) applied since the checkpoint ``files`` came from."""
    checkpoint: list[FileEntry] | None = None
    """Every file of that checkpoint as its manifests list it (inlined ones too): what the
    next changelog version's manifest names, so it need not read its parent's manifest back
    from storage. None in copies written before it: the manifest is read then."""

    def to_json(self) -> str:
        """The state as JSON text, for ``state.json``; ``from_json`` reads it back."""
        # "held_version", not "version": copies written since values may be stored bare
        # (manifest format 3) look unusable to readers that predate it, so those restore
        # from the location, where the manifest's format number refuses them.
        return json.dumps({"held_version": self.version, "manifest": self.manifest,
                           "dirty": self.dirty, "db": self.db,
                           "files": {k: v.__dict__ for k, v in self.files.items()},
                           "changelog": [e.__dict__ for e in self.changelog],
                           "checkpoint": (None if self.checkpoint is None
                                          else [e.__dict__ for e in self.checkpoint])})

    @classmethod
    def from_json(cls, text: str) -> CopyState:
        """The state ``to_json`` wrote (or an older copy's ``version`` field).

        Parameters
        ----------
        text
            The content of ``state.json`` (``ValueError``, ``KeyError`` or ``TypeError`` when
            it is not such a state; ``LocalCopy`` then starts from an empty, dirty state)."""
        data = json.loads(text)
        version = data["held_version"] if "held_version" in data else data["version"]
        checkpoint = data.get("checkpoint")
        return cls(version=version, manifest=data["manifest"], dirty=data["dirty"],
                   db=data["db"], files={k: FileEntry(**v) for k, v in data["files"].items()},
                   changelog=[FileEntry(**e) for e in data.get("changelog", [])],
                   checkpoint=(None if checkpoint is None
                               else [FileEntry(**e) for e in checkpoint]))


class LocalCopy:
    """A locked local directory for one partition; ``release`` unlocks it."""

    def __init__(self, directory: str, *, timeout_s: float, location_url: str,
                 partition: int) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.cache_dir = os.path.join(directory, "cache")
        os.makedirs(self.cache_dir, exist_ok=True)
        self._handle: Any = None
        self._lock(timeout_s, location_url, partition)
        self.state = self._read_state()

    def _lock(self, timeout_s: float, location_url: str, partition: int) -> None:
        path = os.path.join(self.dir, "LOCK")
        handle = open(path, "a+")  # noqa: SIM115 - held until release()
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    handle.close()
                    raise
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    handle.close()
                    raise StateLockedError(
                        f"local state copy {self.dir} of partition {partition} "
                        f"({location_url}) is locked by another process ({holder}); a "
                        "local RocksDB copy can be opened by one process at a time. Close the "
                        "other partition, or use a different local_dir / open_read_only.") from exc
                time.sleep(delay)  # waiting on another process's lock, not syncing a test
                delay = min(delay * 2, 0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
        handle.flush()
        self._handle = handle

    def _read_state(self) -> CopyState:
        path = os.path.join(self.dir, "state.json")
        try:
            with open(path) as handle:
                state = CopyState.from_json(handle.read())
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return CopyState()
        if state.db is None or not os.path.isdir(os.path.join(self.dir, state.db)):
            state.dirty = True
        return state

    def save(self, *, durable: bool = True) -> None:
        """Write ``state.json`` (a new file renamed over the old one). ``durable=False`` skips
        the fsync: for a marker whose loss in a power cut is safe, i.e. one that only says the
        copy is clean. Lost, the copy reads as it was before it: the dirty marker written
        (durably) before the first write of the batch, so the next open restores the version
        from the object store instead of reusing the copy. The marker that says a copy is
        dirty must reach the disk before the DB changes, so it stays durable.

        Parameters
        ----------
        durable
            fsync the new file before renaming it.

        Raises
        ------
        OSError
            The file cannot be written.

        Runs on
        -------
        executor (the task that holds the copy)"""
        path = os.path.join(self.dir, "state.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(self.state.to_json())
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)

    def db_path(self) -> str:
        """The live DB directory (the state names one once a version is held)."""
        if self.state.db is None:
            raise InvariantError(f"local state copy {self.dir} holds version "
                                 f"{self.state.version} but names no DB directory")
        return os.path.join(self.dir, self.state.db)

    def remove_stale(self, keep_cache: set[str]) -> None:
        """Delete DB/checkpoint dirs other than the current one, write logs of versions that
        never committed (left by a crash), and cache files not kept.

        Parameters
        ----------
        keep_cache
            Cache file names still referenced (``restore.cache_name`` of the kept entries).

        Runs on
        -------
        executor (after a commit)"""
        for name in os.listdir(self.dir):
            if (name.startswith(("db-", "ckpt-")) and name != self.state.db):
                shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
            elif name.startswith("changelog-"):
                Path(self.dir, name).unlink(missing_ok=True)
        for name in os.listdir(self.cache_dir):
            if name not in keep_cache:
                Path(self.cache_dir, name).unlink(missing_ok=True)

    def release(self) -> None:
        """Unlock the copy and close the lock file (idempotent).

        Runs on
        -------
        executor (the task that holds the copy)"""
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
