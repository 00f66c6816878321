"""Commit one partition's version: snapshot the local RocksDB, upload what storage lacks, write
an attempt-unique candidate manifest, and (``commit``) publish it.

By default ``prepare_commit`` checkpoints the DB (hard links) and uploads only new SSTs
(``orderedstream.statestore.snapshot``). In changelog mode (``StateStoreOptions.changelog``)
a lineage starts with a checkpoint and takes one every ``snapshot_interval`` versions; the
versions in between upload only their write log (``orderedstream.statestore.rocksdb.changelog``).
Nothing is visible until the candidate is published through the store's ``VersionIndex``.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable

import rocksdict

from orderedstream.core.errors import InvariantError, StateTransactionError
from orderedstream.core.storage import create_exclusive
from orderedstream.statestore.base import CommitCandidate, CommitMetrics
from orderedstream.statestore.manifest import (
    FileEntry,
    Manifest,
    format_for,
    read_manifest,
    writer_identity,
)
from orderedstream.statestore.options import StateLocation
from orderedstream.statestore.restore import cache_name
from orderedstream.statestore.rocksdb.db import META_CF, PartitionDB, Status, count_entry
from orderedstream.statestore.rocksdb.localcopy import CopyState, LocalCopy
from orderedstream.statestore.snapshot import UploadResult, sha256_file, transfer, upload_checkpoint

_log = logging.getLogger("statestore")

_INLINE_CHAIN = 4
"""A changelog chain's inlined logs stay within this many ``changelog_inline_bytes``: every
manifest of the chain carries them all."""
_FRAGMENTS = 32
_FRAGMENT_BYTES = 2 << 20
"""A space is compacted whole above ``max(_FRAGMENTS, its bytes / _FRAGMENT_BYTES)`` files."""

_Upload = tuple[UploadResult, tuple[FileEntry, ...], tuple[FileEntry, ...], float,
                Callable[[], None]]
"""What a snapshot mode uploaded: the upload, the manifest's files and changelog chain, when
the local snapshot was done (``perf_counter``), and how to clean up after it."""


class Committer(PartitionDB):
    """``prepare_commit`` and ``commit``."""

    def prepare_commit(self, version: int, *, writer: str | None = None) -> CommitCandidate:
        """Write buffered puts, snapshot the partition (a checkpoint, or in changelog mode
        this version's write log), upload what storage lacks and create an attempt-unique
        candidate manifest; the local copy is then marked clean at ``version``.

        Parameters
        ----------
        version
            The version to prepare (greater than ``base_version``).
        writer
            Who prepares it (e.g. the Spark task attempt); default: the attempt id.

        Returns
        -------
        CommitCandidate
            Not visible until published; its metrics say what was uploaded.

        Raises
        ------
        StateTransactionError
            The partition is read-only, not open (prepared, failed or closed), ``version`` is
            not greater than ``base_version``, or the manifest already exists.

        Runs on
        -------
        executor (the task that opened the partition)"""
        started = time.perf_counter()
        copy = self._copy
        if copy is None:
            raise self._read_only_error()
        if self._status is not Status.OPEN:
            raise StateTransactionError(
                f"cannot prepare state partition {self.partition} of {self._location.url}: "
                f"it is {self._status.value}")
        if not isinstance(version, int) or version <= self.base_version:
            raise StateTransactionError(
                f"state version {version!r} for partition {self.partition} must be an int "
                f"greater than the version it was opened at ({self.base_version})")
        self._write_ok = False
        try:
            self._flush()
            return self._prepare(copy, version, writer, started)
        except BaseException:
            self._status = Status.FAILED
            raise
        finally:
            self._write_ok = False  # the next write checks the status and marks dirty again

    def _prepare(self, copy: LocalCopy, version: int, writer: str | None,
                 started: float) -> CommitCandidate:
        attempt = uuid.uuid4().hex
        if self._options.exact_key_count:
            meta = self._create_cf(META_CF)
            for space, count in self._counts.items():
                key, value = count_entry(space, count)
                meta.put(key, value)
                if self._log is not None:
                    self._log.put(META_CF, key, value)
        pdir = StateLocation.partition_dir(self.partition)
        # Changelog mode: a lineage starts with a checkpoint, then takes one every
        # snapshot_interval versions (a restore replays at most snapshot_interval - 1 logs).
        full = (not self._changelog_mode or copy.state.manifest is None
                or len(copy.state.changelog) + 1 >= self._options.snapshot_interval)
        if full:
            if self._log is not None:
                self._log.discard()
                self._log = None
            result, files, chain, ckpt_s, cleanup = self._upload_checkpoint(copy, pdir,
                                                                            version, attempt)
        else:
            result, files, chain, ckpt_s, cleanup = self._upload_changelog(copy, pdir,
                                                                           version, attempt)
        try:
            uploaded = time.perf_counter()
            manifest_rel = f"{pdir}/manifests/{version}-{attempt}.json"
            num_keys = self.num_keys()
            manifest = Manifest(
                partition=self.partition, version=version, parent_version=self.base_version,
                parent_manifest=copy.state.manifest, files=files, changelog=chain,
                format=format_for(chain),
                num_keys=num_keys,
                key_counts={s: self._counts.get(s, 0) for s in self.spaces()},
                spaces={s: self._codec(s).spec() for s in self.spaces()},
                writer=writer_identity(writer, attempt), created_at=time.time())
            if not create_exclusive(self._fs, f"{self._root}/{manifest_rel}",
                                    manifest.to_json()):
                raise StateTransactionError(f"manifest {manifest_rel} already exists")
            old = [*copy.state.files.values(), *copy.state.changelog]
            new_files = {e.name: e for e in manifest.sst_entries()}
            for remote, local in result.new_files.items():
                target = os.path.join(copy.cache_dir, remote.rsplit("/", 1)[-1])
                if not os.path.exists(target):
                    os.link(local, target)
            copy.state = CopyState(version=version, manifest=manifest_rel, dirty=False,
                                   db=copy.state.db, files=new_files, changelog=list(chain),
                                   checkpoint=list(files))
            copy.save(durable=False)  # a clean marker: lost in a power cut, the copy restores
            keep = {cache_name(e) for e in [*old, *manifest.remote_entries()]}
        finally:
            cleanup()
        copy.remove_stale(keep)
        self._status = Status.PREPARED
        metrics = CommitMetrics(
            partition=self.partition, version=version, num_keys=num_keys, puts=self._puts,
            deletes=self._deletes, bytes_written=self._bytes_written,
            files_total=len(files) + len(chain), files_uploaded=result.files_uploaded,
            files_reused=result.files_reused, bytes_uploaded=result.bytes_uploaded,
            bytes_total=manifest.total_bytes, checkpoint_seconds=ckpt_s - started,
            upload_seconds=uploaded - ckpt_s,
            commit_seconds=time.perf_counter() - started, manifest_path=manifest_rel,
            changelog=not full)
        _log.info("state candidate %s", metrics.to_dict())
        return CommitCandidate(location_url=self._location.url, partition=self.partition,
                               version=version, manifest_path=manifest_rel,
                               writer=writer or attempt, metrics=metrics)

    def _upload_checkpoint(self, copy: LocalCopy, pdir: str, version: int,
                           attempt: str) -> _Upload:
        """A full snapshot: checkpoint (flushes the memtables), upload the SSTs not uploaded
        before. The manifest's changelog chain is empty."""
        ckpt = os.path.join(copy.dir, f"ckpt-{attempt}")
        self._compact_fragments()
        rocksdict.Checkpoint(self._db).create_checkpoint(ckpt)
        checkpointed = time.perf_counter()
        try:
            result = upload_checkpoint(self._fs, self._root, pdir, ckpt, version, attempt,
                                       copy.state.files,
                                       batch_size=self._options.upload_concurrency)
        except BaseException:
            shutil.rmtree(ckpt, ignore_errors=True)
            raise
        return (result, tuple(result.entries), (), checkpointed,
                lambda: shutil.rmtree(ckpt, ignore_errors=True))

    def _compact_fragments(self) -> None:
        """Merge a space's SSTs once they are many and small on average.

        Every commit flushes each written space into a small file, and RocksDB moves a file
        whose keys overlap no other file's (new session keys, increasing timeout keys) down
        to the last level as it is, where leveled compaction never merges it: files grew by
        one per space and batch, and with them the cost of every open, every
        checkpoint's links and every manifest. A space with more than ``_FRAGMENTS`` files
        and under ``_FRAGMENT_BYTES`` per file on average is rewritten whole (last level
        included), so a 1 GiB space waits for 512 files and a small one rewrites a few KiB.
        """
        for name, cf in self._cfs.items():
            files = sum(cf.property_int_value(f"rocksdb.num-files-at-level{level}") or 0
                        for level in range(7))
            size = cf.property_int_value("rocksdb.total-sst-files-size") or 0
            if files > max(_FRAGMENTS, size // _FRAGMENT_BYTES):
                options = rocksdict.CompactOptions()
                options.set_bottommost_level_compaction(
                    rocksdict.BottommostLevelCompaction.force())
                cf.compact_range(None, None, options)
                _log.info("state partition %s of %s: space %s compacted (%d files, %d bytes)",
                          self.partition, self._location.url, name, files, size)

    def _upload_changelog(self, copy: LocalCopy, pdir: str, version: int,
                          attempt: str) -> _Upload:
        """A changelog version: flush locally (the local copy must hold what it claims once
        marked clean), upload this version's write log, keep the checkpoint files as they
        are."""
        if copy.state.checkpoint is None:  # a copy written before it recorded its checkpoint
            base = copy.state.manifest
            if base is None:
                raise InvariantError(
                    f"changelog version {version} of state partition {self.partition} at "
                    f"{self._location.url} has no checkpoint to apply to: the local copy "
                    f"holds version {copy.state.version} without a manifest")
            copy.state.checkpoint = list(read_manifest(self._fs, self._root, base).files)
        checkpoint = tuple(copy.state.checkpoint)  # what the parent manifest lists
        if self._log is None:  # no write at all this version: an empty log keeps the chain
            self._log = self._new_log(copy)
        log, self._log = self._log, None
        for cf in self._cfs.values():
            cf.flush()
        flushed = time.perf_counter()
        name = f"changelog-{version}.log"
        try:
            size = log.close(sync=False)  # an inlined log is discarded: synced only if kept
            sha256 = sha256_file(log.path)
            limit = self._options.changelog_inline_bytes
            inlined = sum(e.size for e in copy.state.changelog if e.remote is None)
            if size <= limit and inlined + size <= _INLINE_CHAIN * limit:
                with open(log.path, "rb") as handle:  # at most changelog_inline_bytes
                    inline = base64.b64encode(handle.read()).decode()
                entry = FileEntry(name=name, size=size, sha256=sha256, inline=inline)
                new_files = {}
            else:
                remote = f"{pdir}/sst/{version}-changelog-{attempt[:12]}.log"
                log.sync()  # linked into the local copy's cache once committed
                transfer(self._fs, "put", [log.path], [f"{self._root}/{remote}"],
                         self._options.upload_concurrency)
                entry = FileEntry(name=name, size=size, sha256=sha256, remote=remote)
                new_files = {remote: log.path}
        except BaseException:
            log.discard()
            raise
        chain = (*copy.state.changelog, entry)
        result = UploadResult(entries=[entry], new_files=new_files,
                              files_uploaded=len(new_files),
                              files_reused=len(copy.state.files) + len(chain) - 1,
                              bytes_uploaded=size)
        return result, checkpoint, chain, flushed, log.discard

    def commit(self, version: int, *, writer: str | None = None) -> CommitMetrics:
        """``prepare_commit`` and publish through the store's index; the partition then stays
        open at ``version`` for the next batch.

        Parameters
        ----------
        version, writer
            As in ``prepare_commit``.

        Returns
        -------
        CommitMetrics
            What the commit did, ``commit_seconds`` including the publish.

        Raises
        ------
        StateTransactionError
            As in ``prepare_commit``.
        CommitConflictError
            Another attempt published ``version`` first (the partition is then failed).

        Runs on
        -------
        executor (the task that opened the partition)"""
        started = time.perf_counter()
        publish = self._publish
        if publish is None:  # only read-only partitions have no publisher
            raise self._read_only_error()
        candidate = self.prepare_commit(version, writer=writer)
        try:
            publish(candidate)
        except BaseException:
            self._status = Status.FAILED
            raise
        self._status = Status.OPEN
        self.base_version = version
        self._puts = self._deletes = self._bytes_written = 0
        m = candidate.metrics
        metrics = CommitMetrics(**{**m.to_dict(),
                                   "commit_seconds": time.perf_counter() - started})
        _log.info("state commit %s", metrics.to_dict())
        return metrics
