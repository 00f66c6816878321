"""``RocksDBStateStore``: the RocksDB implementation of ``StateStoreBase``. Opens partitions at
versions (restoring them from storage when the local copy does not hold them), publishes,
applies retention.

Picklable (location, options and index only); filesystems and RocksDB handles are created
where it is used, so the same object works on the driver and in executor Python workers.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from typing import Any

from orderedstream.core.errors import OptionError, StateNotFoundError
from orderedstream.statestore.base import (
    EMPTY_VERSION,
    CommitCandidate,
    RestoreMetrics,
    StateStoreBase,
    VersionIndex,
)
from orderedstream.statestore.codecs import codec_from_spec
from orderedstream.statestore.index import PointerVersionIndex
from orderedstream.statestore.manifest import Manifest, read_manifest
from orderedstream.statestore.options import StateLocation, StateStoreOptions
from orderedstream.statestore.restore import assemble, cache_name, fetch
from orderedstream.statestore.retention import cleanup_partition
from orderedstream.statestore.rocksdb import keepopen
from orderedstream.statestore.rocksdb.changelog import replay
from orderedstream.statestore.rocksdb.db import open_rdict, options_fingerprint
from orderedstream.statestore.rocksdb.keepopen import Kept
from orderedstream.statestore.rocksdb.localcopy import CopyState, LocalCopy
from orderedstream.statestore.rocksdb.options import make_options
from orderedstream.statestore.rocksdb.partition import RocksDBStatePartition

_log = logging.getLogger("statestore")


class RocksDBStateStore(StateStoreBase):
    """All partitions of one state location, kept in local RocksDB copies.

    ``location``: a ``StateLocation``, or its URL with the fsspec arguments in
    ``storage_options`` (keyword only; both together are refused). ``index`` decides which
    candidate is version N (default: ``PointerVersionIndex``, pointer objects created
    exclusively under the location). ``last_restore`` holds the ``RestoreMetrics`` of the
    latest ``open`` in this process.
    """

    def __init__(self, location: StateLocation | str, options: StateStoreOptions | None = None,
                 *, index: VersionIndex | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        if isinstance(location, str):
            location = StateLocation(location, storage_options=storage_options or {})
        elif storage_options is not None:
            raise OptionError("pass storage_options inside the StateLocation, not both")
        self.location = location
        self.options = options or StateStoreOptions()
        self.index: VersionIndex = index if index is not None else PointerVersionIndex(location)
        self._fs: Any = None
        self._root = ""
        self.last_restore: RestoreMetrics | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location, "options": self.options, "index": self.index}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["location"], state["options"], index=state["index"])  # type: ignore[misc]

    def filesystem(self) -> tuple[Any, str]:
        """The location's fsspec filesystem and root path, created on first use here.

        Runs on
        -------
        both"""
        if self._fs is None:
            self._fs, self._root = self.location.filesystem()
        return self._fs, self._root

    def local_copy_dir(self, partition: int) -> str:
        """Where this process keeps ``partition``'s local copy (under ``local_dir``).

        Parameters
        ----------
        partition
            The partition.

        Runs on
        -------
        both (executors keep the copies)"""
        return os.path.join(self.options.resolved_local_dir(), self.location.key(),
                            StateLocation.partition_dir(partition))

    def _check_partition(self, partition: int) -> None:
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise OptionError(f"state partition {partition!r}: a non-negative int is required")

    def _resolve(self, partition: int, version: int) -> str:
        rel = self.index.resolve(partition, version)
        if rel is None:
            known = self.index.versions(partition)
            raise StateNotFoundError(
                f"state version {version} of partition {partition} was never committed at "
                f"{self.location.url}; committed versions: "
                f"{known[-10:] if known else 'none'}")
        return rel

    def open(self, partition: int, version: int, *,
             writer: str | None = None) -> RocksDBStatePartition:
        """``StateStoreBase.open``: lock the local copy, then reuse it (a DB this process kept
        open, or the files on disk) when it holds ``version`` clean, else restore that version
        into a new DB directory (changelogs replayed). ``last_restore`` says which.

        Parameters
        ----------
        partition, version, writer
            As in ``StateStoreBase.open``.

        Raises
        ------
        OptionError
            ``partition`` is not an int >= 0 or ``version`` not an int >= ``EMPTY_VERSION``.
        StateNotFoundError
            ``version`` was never published.
        StateLockedError
            Another process holds the local copy (or keeps its DB open) past
            ``lock_timeout_s``.
        CorruptStateError
            A file of the version is missing or does not match its manifest.

        Runs on
        -------
        executor (the task that owns the partition in the batch)"""
        self._check_partition(partition)
        if not isinstance(version, int) or version < EMPTY_VERSION:
            raise OptionError(f"state version {version!r}: an int >= {EMPTY_VERSION} "
                              "(EMPTY_VERSION opens an empty partition) is required")
        started = time.perf_counter()
        fs, root = self.filesystem()
        waited = time.monotonic()
        copy = LocalCopy(self.local_copy_dir(partition), timeout_s=self.options.lock_timeout_s,
                         location_url=self.location.url, partition=partition)
        waited = time.monotonic() - waited
        kept = None
        try:
            rel = None if version == EMPTY_VERSION else self._resolve(partition, version)
            st = copy.state
            downloaded = reused_files = bytes_downloaded = 0
            reused = (not st.dirty and st.version == version and st.manifest == rel
                      and st.db is not None)
            # one lock_timeout_s for both waits: the copy's lock, then its keeper
            kept = self._kept(copy, reused, partition,
                              timeout_s=max(0.0, self.options.lock_timeout_s - waited))
            if not reused:
                db = f"db-{uuid.uuid4().hex[:12]}"
                files = {}
                chain = []
                checkpoint = None
                if rel is None:
                    os.makedirs(os.path.join(copy.dir, db))
                else:
                    manifest = read_manifest(fs, root, rel)
                    got = fetch(fs, root, manifest, copy.cache_dir,
                                location_url=self.location.url,
                                verify_local=self.options.verify_local_cache,
                                batch_size=self.options.upload_concurrency)
                    downloaded, reused_files = got.files_downloaded, got.files_reused
                    bytes_downloaded = got.bytes_downloaded
                    self._build(manifest, copy.cache_dir, os.path.join(copy.dir, db))
                    files = {e.name: e for e in manifest.sst_entries()}
                    chain = list(manifest.changelog)
                    checkpoint = list(manifest.files)
                copy.state = CopyState(version=version, manifest=rel, dirty=False, db=db,
                                       files=files, changelog=chain, checkpoint=checkpoint)
                copy.save()
                copy.remove_stale({cache_name(e) for e in [*files.values(), *chain]})
            part = RocksDBStatePartition(
                location=self.location, fs=fs, root=root, partition=partition, version=version,
                options=self.options, db_path=copy.db_path(), copy=copy, publish=self.publish,
                kept=kept)
        except BaseException:
            if kept is not None:
                kept.close()
            copy.release()
            raise
        self.last_restore = RestoreMetrics(
            partition=partition, version=version, reused_local=reused, kept_open=kept is not None,
            files_downloaded=downloaded, files_reused=reused_files,
            bytes_downloaded=bytes_downloaded, restore_seconds=time.perf_counter() - started)
        _log.info("state open %s", self.last_restore.to_dict())
        return part

    def _kept(self, copy: LocalCopy, reused: bool, partition: int, *,
              timeout_s: float) -> Kept | None:
        """The DB of ``copy`` this process kept open (``keepopen``) when it holds the version
        being opened, else None; a DB of the copy kept here or by another process is closed
        first, so the copy's DB can be opened, replaced or deleted."""
        kept = keepopen.take(copy.dir)
        keepopen.release_elsewhere(copy.dir, timeout_s=timeout_s,
                                   what=f"state partition {partition} of {self.location.url}")
        if kept is None:
            return None
        st = copy.state
        if (reused and kept.db_name == st.db and kept.version == st.version
                and kept.manifest == st.manifest
                and kept.fingerprint == options_fingerprint(self.options)):
            return kept
        kept.close()
        return None

    def _build(self, manifest: Manifest, cache_dir: str, db_dir: str) -> None:
        """The DB of ``manifest`` from fetched files: its checkpoint, then its changelogs
        replayed in order and flushed (so the local copy holds the version on disk)."""
        assemble(manifest, cache_dir, db_dir, location_url=self.location.url)
        if not manifest.changelog:
            return
        db = open_rdict(db_dir, self.options, read_only=False)
        families: dict[str, tuple[Any, Any]] = {}

        def family(name: str) -> tuple[Any, Any]:
            found = families.get(name)
            if found is None:
                if name == "default":
                    cf = db
                else:
                    try:
                        cf = db.get_column_family(name)
                    except Exception:  # rocksdict raises a bare Exception for a missing family
                        cf = db.create_column_family(name, make_options(self.options))
                found = families[name] = (db.get_column_family_handle(name), cf)
            return found

        try:
            for entry in manifest.changelog:
                replay(db, os.path.join(cache_dir, cache_name(entry)), family)
            for _, cf in families.values():
                cf.flush()
            db.flush()
        finally:
            families.clear()
            db.close()

    def read_manifest(self, partition: int, version: int) -> Manifest:
        """The manifest of a published version (files, key counts, codecs, writer).

        Parameters
        ----------
        partition, version
            The published version.

        Raises
        ------
        StateNotFoundError
            ``version`` was never published.

        Runs on
        -------
        both"""
        fs, root = self.filesystem()
        return read_manifest(fs, root, self._resolve(partition, version))

    def open_read_only(self, partition: int,
                       version: int | None = None) -> RocksDBStatePartition:
        """``StateStoreBase.open_read_only``: the version is fetched into a private temp dir
        under ``local_dir`` (removed at ``close``) and decoded with its manifest's codecs.

        Parameters
        ----------
        partition, version
            As in ``StateStoreBase.open_read_only``.

        Raises
        ------
        OptionError
            ``partition`` is not an int >= 0.
        StateNotFoundError
            ``version`` was never published, or (None) no version was.
        CorruptStateError
            A file of the version is missing or does not match its manifest.

        Runs on
        -------
        both (the driver, or a reader's tasks)"""
        self._check_partition(partition)
        if version is None:
            version = self.latest_version(partition)
            if version == EMPTY_VERSION:
                raise StateNotFoundError(f"partition {partition} has no committed state "
                                         f"version at {self.location.url}")
        fs, root = self.filesystem()
        manifest = self.read_manifest(partition, version)
        base = self.options.resolved_local_dir()
        os.makedirs(base, exist_ok=True)
        temp = tempfile.mkdtemp(prefix=f"ro-p{partition}-v{version}-", dir=base)
        try:
            fetch(fs, root, manifest, os.path.join(temp, "cache"),
                  location_url=self.location.url, batch_size=self.options.upload_concurrency)
            db = os.path.join(temp, "db")
            self._build(manifest, os.path.join(temp, "cache"), db)
            codecs = {name: codec_from_spec(spec) for name, spec in manifest.spaces.items()}
            return RocksDBStatePartition(
                location=self.location, fs=fs, root=root, partition=partition, version=version,
                options=self.options, db_path=db, copy=None, publish=None, codecs=codecs,
                temp_dir=temp)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise

    def publish(self, candidate: CommitCandidate) -> None:
        """``StateStoreBase.publish`` through ``self.index``.

        Parameters
        ----------
        candidate
            A candidate prepared for this location.

        Raises
        ------
        OptionError
            ``candidate`` was prepared for another location.
        CommitConflictError
            Another candidate was published for that version first.

        Runs on
        -------
        both (the committing task, or the driver)"""
        if candidate.location_url != self.location.url:
            raise OptionError(f"candidate for {candidate.location_url} cannot be published at "
                              f"{self.location.url}")
        self.index.publish(candidate)

    def latest_version(self, partition: int) -> int:
        """``StateStoreBase.latest_version``, from ``self.index``.

        Parameters
        ----------
        partition
            The partition to look up.

        Runs on
        -------
        both"""
        versions = self.index.versions(partition)
        return versions[-1] if versions else EMPTY_VERSION

    def partitions(self) -> list[int]:
        """``StateStoreBase.partitions``: ``p=<P>`` folders with a published version.

        Runs on
        -------
        driver"""
        fs, root = self.filesystem()
        fs.invalidate_cache(root)
        try:
            names = fs.ls(root, detail=False)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            base = name.rstrip("/").rsplit("/", 1)[-1]
            if base.startswith("p=") and base[2:].isdigit() and self.index.versions(int(base[2:])):
                out.append(int(base[2:]))
        return sorted(out)

    def cleanup(self, partition: int, *, keep_last: int | None = None) -> dict[str, int]:
        """``StateStoreBase.cleanup`` (``retention.cleanup_partition``), counts logged.

        Parameters
        ----------
        partition, keep_last
            As in ``StateStoreBase.cleanup`` (``keep_last`` None: ``options.keep_last``).

        Raises
        ------
        OptionError
            ``keep_last`` is below 1.

        Runs on
        -------
        driver (or wherever the caller runs retention)"""
        fs, root = self.filesystem()
        counts = cleanup_partition(fs, root, self.index, partition,
                                   keep_last if keep_last is not None else self.options.keep_last)
        _log.info("state cleanup partition %s at %s: %s", partition, self.location.url, counts)
        return counts


__all__ = ["RocksDBStateStore"]
