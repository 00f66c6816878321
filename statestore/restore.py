"""Restore a version locally: download only the files the local cache lacks, verify them by
checksum, and assemble a RocksDB directory from hard links (SSTs) and copies (the rest).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orderedstream.core.errors import CorruptStateError, InvariantError
from orderedstream.statestore.manifest import FileEntry, Manifest
from orderedstream.statestore.snapshot import sha256_file, transfer


@dataclass
class FetchResult:
    """What ``fetch`` did: files downloaded, files already in the cache, bytes downloaded."""

    files_downloaded: int
    files_reused: int
    bytes_downloaded: int


def cache_name(entry: FileEntry) -> str:
    """The local cache file name of an uploaded file (its remote name), or of a changelog
    inlined in its manifest (named by its checksum: the same log in every manifest of the
    chain is one cache file).

    Parameters
    ----------
    entry
        A manifest's file entry, uploaded or an inlined changelog.

    Raises
    ------
    InvariantError
        ``entry`` is another inlined file: it never goes to the cache.

    Runs on
    -------
    both (where a version is restored: executors, and the driver for read-only views)"""
    if entry.remote is not None:
        return entry.remote.rsplit("/", 1)[-1]
    if entry.inline is not None and entry.name.startswith("changelog-"):
        return f"inline-{entry.sha256[:32]}.log"
    raise InvariantError(f"state file {entry.name} is inlined in its manifest: it has no "
                         "remote copy to cache")


def fetch(fs: Any, root: str, manifest: Manifest, cache_dir: str, *, location_url: str,
          verify_local: bool = False, batch_size: int = 8) -> FetchResult:
    """Make every remote file of ``manifest`` present and verified in ``cache_dir``.

    A cached file of the right size is reused; the rest are downloaded under temporary names,
    checked (size and sha256) and renamed into place. Inlined changelogs are written to the
    cache too, checked the same way.

    Parameters
    ----------
    fs, root
        The state location's filesystem and root path.
    manifest
        The version to fetch.
    cache_dir
        The local file cache (created if missing).
    location_url
        The location as errors name it.
    verify_local
        Also check the sha256 of files already in the cache.
    batch_size
        Concurrent downloads.

    Returns
    -------
    FetchResult
        What was downloaded and what was reused.

    Raises
    ------
    CorruptStateError
        A file is missing at the location, or a downloaded or inlined file does not match
        its entry.

    Runs on
    -------
    both (executors at open, the driver for read-only views)"""
    os.makedirs(cache_dir, exist_ok=True)
    missing: list[FileEntry] = []
    reused = 0
    for entry in manifest.remote_entries():
        local = os.path.join(cache_dir, cache_name(entry))
        if os.path.exists(local) and os.path.getsize(local) == entry.size and (
                not verify_local or sha256_file(local) == entry.sha256):
            reused += 1
        else:
            missing.append(entry)
    if missing:
        tag = uuid.uuid4().hex[:8]
        parts = [os.path.join(cache_dir, f"{cache_name(e)}.part-{tag}") for e in missing]
        try:
            transfer(fs, "get", [f"{root}/{e.remote}" for e in missing], parts, batch_size)
        except FileNotFoundError as exc:
            _drop(parts)
            absent = [f"{root}/{e.remote}" for e in missing if not fs.exists(f"{root}/{e.remote}")]
            raise CorruptStateError(
                f"state version {manifest.version} of partition {manifest.partition} at "
                f"{location_url} cannot be restored: file(s) {absent or [str(exc)]} are missing. "
                "Open an earlier committed version or rebuild the state.") from exc
        for entry, part in zip(missing, parts, strict=True):
            _verify(part, entry, parts, f"state file {root}/{entry.remote} (version "
                    f"{manifest.version} of partition {manifest.partition} at "
                    f"{location_url})")
            os.replace(part, os.path.join(cache_dir, cache_name(entry)))
    for entry in manifest.changelog:
        if entry.remote is None:
            _write_inline(entry, manifest, cache_dir, location_url)
    return FetchResult(files_downloaded=len(missing), files_reused=reused,
                       bytes_downloaded=sum(e.size for e in missing))


def _write_inline(entry: FileEntry, manifest: Manifest, cache_dir: str,
                  location_url: str) -> None:
    """Put a changelog inlined in ``manifest`` in the cache, checked like a downloaded one."""
    target = os.path.join(cache_dir, cache_name(entry))
    if os.path.exists(target) and os.path.getsize(target) == entry.size:
        return  # else torn (written without fsync before a power cut): written again
    what = (f"changelog {entry.name} inlined in state version {manifest.version} of partition "
            f"{manifest.partition} at {location_url}")
    try:
        data = entry.content()
    except ValueError as exc:  # not base64
        raise CorruptStateError(f"{what} is unreadable: {exc}") from exc
    part = f"{target}.part-{uuid.uuid4().hex[:8]}"
    with open(part, "wb") as handle:
        handle.write(data)
    _verify(part, entry, [part], what)
    os.replace(part, target)


def _verify(path: str, entry: FileEntry, cleanup: list[str], what: str) -> None:
    """Refuse the file at ``path`` (``what`` names it in the error) unless its size and sha256
    are ``entry``'s; ``cleanup`` is removed first."""
    size = os.path.getsize(path) if os.path.exists(path) else -1
    digest = sha256_file(path) if size >= 0 else ""
    if size != entry.size or digest != entry.sha256:
        _drop(cleanup)
        raise CorruptStateError(
            f"{what} is corrupt: expected {entry.size} bytes sha256 {entry.sha256[:16]}..., got "
            f"{size} bytes sha256 {digest[:16]}... Refusing to load it; open an earlier "
            "committed version or rebuild the state.")


def _drop(paths: Iterable[str]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def assemble(manifest: Manifest, cache_dir: str, db_dir: str, *, location_url: str) -> None:
    """Build a RocksDB directory for ``manifest`` (SSTs hard-linked from the cache).

    Inlined files are written out, other non-SST files copied (RocksDB may append to them).

    Parameters
    ----------
    manifest
        The version to assemble; ``fetch`` has filled ``cache_dir`` for it.
    cache_dir
        The local file cache.
    db_dir
        The directory to create (it must not exist).
    location_url
        The location as errors name it.

    Raises
    ------
    CorruptStateError
        An inlined file's size is not its entry's.
    FileExistsError
        ``db_dir`` exists already.

    Runs on
    -------
    both (executors at open, the driver for read-only views)"""
    os.makedirs(db_dir)
    for entry in manifest.files:
        target = os.path.join(db_dir, entry.name)
        if entry.inline is not None:
            data = entry.content()
            if len(data) != entry.size:
                raise CorruptStateError(
                    f"inline file {entry.name} of state version {manifest.version} partition "
                    f"{manifest.partition} at {location_url} has the wrong size")
            with open(target, "wb") as handle:
                handle.write(data)
        elif entry.name.endswith(".sst"):
            os.link(os.path.join(cache_dir, cache_name(entry)), target)
        else:  # RocksDB may append to non-SST files: copy, never link
            shutil.copyfile(os.path.join(cache_dir, cache_name(entry)), target)
