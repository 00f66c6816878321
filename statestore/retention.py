"""Retention: keep the last M published versions of a partition; delete everything else.

Deleted: version records older than the retained ones, manifests no retained version is
(candidates of crashed or zombie attempts included) and files no retained manifest references.
Only artifacts of versions ``<= latest published`` are touched: a higher-numbered candidate
may belong to an attempt still running, so it is left for a later cleanup.
"""

from __future__ import annotations

from typing import Any

from statestore.base import VersionIndex
from statestore.manifest import read_manifest
from statestore.options import StateLocation


def _version_of(name: str) -> int | None:
    head = name.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _list(fs: Any, path: str) -> list[str]:
    fs.invalidate_cache(path)
    try:
        return [p.rstrip("/") for p in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return []


def cleanup_partition(fs: Any, root: str, index: VersionIndex, partition: int,
                      keep_last: int) -> dict[str, int]:
    """Apply retention to one partition; returns counts of deleted versions/manifests/files."""
    if keep_last < 1:
        raise ValueError(f"keep_last={keep_last}: at least 1 version must be kept")
    published = index.versions(partition)
    if not published:
        return {"versions": 0, "manifests": 0, "files": 0}
    latest = published[-1]
    retained = published[-keep_last:]
    keep_manifests: set[str] = set()
    keep_files: set[str] = set()
    for version in retained:
        rel = index.resolve(partition, version)
        if rel is None:
            continue
        keep_manifests.add(rel)
        for entry in read_manifest(fs, root, rel).files:
            if entry.remote is not None:
                keep_files.add(entry.remote)
    pdir = StateLocation.partition_dir(partition)
    deleted = {"versions": 0, "manifests": 0, "files": 0}
    # Forget old versions first: a reader never finds a record whose files are gone.
    for version in published[:-keep_last]:
        index.forget(partition, version)
        deleted["versions"] += 1
    doomed: list[str] = []
    for sub, kind in (("manifests", "manifests"), ("sst", "files")):
        keep = keep_manifests if kind == "manifests" else keep_files
        for path in _list(fs, f"{root}/{pdir}/{sub}"):
            rel = path[len(root) + 1:] if path.startswith(root + "/") else path
            version = _version_of(rel)
            if rel in keep or version is None or version > latest:
                continue
            doomed.append(path)
            deleted[kind] += 1
    if doomed:
        fs.rm(doomed)
    return deleted
