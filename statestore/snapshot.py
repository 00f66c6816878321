"""Upload a RocksDB checkpoint incrementally: only SST files no earlier version uploaded.

SST files are immutable, so a (local name, size) already uploaded for this local copy's
lineage is referenced again instead of uploaded. New SSTs go under unique names
``p=<P>/sst/<version>-<file>-<attempt>.sst`` (the version prefix lets retention tell
files of decided versions from those of in-flight attempts). Small non-SST files are inlined
in the manifest; big ones are uploaded under attempt-unique names like SSTs.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orderedstream.core import objectstore, threads
from orderedstream.statestore.manifest import FileEntry

INLINE_LIMIT = 1 << 20


def sha256_file(path: str) -> str:
    """The SHA-256 of a local file's content, as hex.

    Parameters
    ----------
    path
        The local file.

    Raises
    ------
    OSError
        The file cannot be read.

    Runs on
    -------
    executor (where a partition commits or restores)"""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def transfer(fs: Any, method: str, sources: list[str], targets: list[str],
             batch_size: int) -> None:
    """``fs.put``/``fs.get`` of many files; concurrent on async filesystems (s3fs). Puts to
    S3 go through obstore where the filesystem's settings allow (``core.objectstore``).

    Parameters
    ----------
    fs
        The fsspec filesystem of the state location.
    method
        ``"put"`` (local to remote) or ``"get"`` (remote to local).
    sources, targets
        Paths to copy from and to, pairwise (equal lengths).
    batch_size
        How many copies run at once where they run concurrently.

    Raises
    ------
    OSError
        A copy failed (``FileNotFoundError`` for a missing source); the filesystem's own
        error types pass through.

    Runs on
    -------
    executor (commits upload, restores download)"""
    if method == "put" and targets and objectstore.native(fs, targets[0]):
        if len(sources) == 1:
            objectstore.put(fs, targets[0], sources[0])
            return
        with threads.lend("put", max(1, batch_size)) as pool:
            list(pool.map(lambda pair: objectstore.put(fs, pair[1], pair[0]),
                          zip(sources, targets, strict=True)))
        return
    if getattr(fs, "async_impl", False):
        getattr(fs, method)(sources, targets, batch_size=batch_size)
        return
    if method == "put":
        for target in {t.rsplit("/", 1)[0] for t in targets}:
            fs.makedirs(target, exist_ok=True)
    for source, target in zip(sources, targets, strict=True):
        getattr(fs, method)(source, target)


@dataclass
class UploadResult:
    """What ``upload_checkpoint`` described and uploaded: the manifest's file entries, the
    files this call uploaded, and counts of files uploaded and reused and bytes uploaded."""

    entries: list[FileEntry]
    new_files: dict[str, str]
    """remote path (relative) -> local checkpoint path, for files uploaded by this call."""
    files_uploaded: int
    files_reused: int
    bytes_uploaded: int


def upload_checkpoint(fs: Any, root: str, partition_dir: str, checkpoint_dir: str,
                      version: int, attempt: str, known: Mapping[str, FileEntry],
                      batch_size: int = 8) -> UploadResult:
    """Describe every file of ``checkpoint_dir`` and upload those not in ``known``.

    An SST whose name and size are in ``known`` is referenced again; other SSTs and non-SST
    files over ``INLINE_LIMIT`` are uploaded under ``<partition_dir>/sst/<version>-<name>-
    <attempt>``; small non-SST files are inlined (base64) in their entry.

    Parameters
    ----------
    fs, root
        The state location's filesystem and root path.
    partition_dir
        The partition's directory under ``root`` (``p=<P>``).
    checkpoint_dir
        The local RocksDB checkpoint to describe.
    version, attempt
        The version being prepared and the attempt's id (its first 12 characters name
        uploaded files, so attempts never overwrite each other).
    known
        Entries of files the lineage already uploaded, by local file name.
    batch_size
        Concurrent uploads.

    Returns
    -------
    UploadResult
        Entries of every file, in name order, and what was uploaded.

    Raises
    ------
    OSError
        A local file cannot be read or an upload failed.

    Runs on
    -------
    executor (the committing task)"""
    entries: list[FileEntry] = []
    to_upload: dict[str, str] = {}
    reused = 0
    for name in sorted(os.listdir(checkpoint_dir)):
        local = os.path.join(checkpoint_dir, name)
        size = os.path.getsize(local)
        previous = known.get(name)
        if name.endswith(".sst") and previous is not None and previous.size == size:
            entries.append(previous)
            reused += 1
            continue
        digest = sha256_file(local)
        if not name.endswith(".sst") and size <= INLINE_LIMIT:
            with open(local, "rb") as handle:
                inline = base64.b64encode(handle.read()).decode()
            entries.append(FileEntry(name=name, size=size, sha256=digest, inline=inline))
            continue
        stem = name.rsplit(".", 1)[0] if name.endswith(".sst") else name
        suffix = ".sst" if name.endswith(".sst") else ".bin"
        remote = f"{partition_dir}/sst/{version}-{stem}-{attempt[:12]}{suffix}"
        entries.append(FileEntry(name=name, size=size, sha256=digest, remote=remote))
        to_upload[remote] = local
    if to_upload:
        remotes = list(to_upload)
        transfer(fs, "put", [to_upload[r] for r in remotes], [f"{root}/{r}" for r in remotes],
                 batch_size)
    return UploadResult(entries=entries, new_files=to_upload, files_uploaded=len(to_upload),
                        files_reused=reused,
                        bytes_uploaded=sum(os.path.getsize(p) for p in to_upload.values()))
