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
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def transfer(fs: Any, method: str, sources: list[str], targets: list[str],
             batch_size: int) -> None:
    """``fs.put``/``fs.get`` of many files; concurrent on async filesystems (s3fs). Puts to
    S3 go through obstore where the filesystem's settings allow (``core.objectstore``)."""
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
    entries: list[FileEntry]
    new_files: dict[str, str]
    """remote path (relative) -> local checkpoint path, for files uploaded by this call."""
    files_uploaded: int
    files_reused: int
    bytes_uploaded: int


def upload_checkpoint(fs: Any, root: str, partition_dir: str, checkpoint_dir: str,
                      version: int, attempt: str, known: Mapping[str, FileEntry],
                      batch_size: int = 8) -> UploadResult:
    """Describe every file of ``checkpoint_dir`` and upload those not in ``known``."""
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
