"""Retention: keep the last M published versions of a partition; delete everything else.

Deleted: version records older than the retained ones, manifests no retained version is
(candidates of crashed or zombie attempts included) and files no retained manifest references.
Only artifacts of versions ``<= latest published`` are touched: a higher-numbered candidate
may belong to an attempt still running, so it is left for a later cleanup.

``artifact_of`` and ``unreferenced`` are shared with the ordered stage's commit-log-driven
retention (``orderedstream.statestore.ordered.retention``), which decides what is retained
differently.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from orderedstream.core.errors import OptionError
from orderedstream.statestore.base import VersionIndex
from orderedstream.statestore.manifest import read_manifest
from orderedstream.statestore.options import StateLocation

ARTIFACT_DIRS = {"manifests": "manifests", "sst": "files"}
"""Partition sub-directory -> the kind of artifact it holds (as counted by retention)."""


def _version_of(name: str) -> int | None:
    head = name.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def artifact_of(rel: str) -> tuple[str, int] | None:
    """``(kind, version)`` of a partition artifact path ``.../p=<P>/<manifests|sst>/<v>-...``
    (kind ``"manifests"`` or ``"files"``); None for anything else (pointers, foreign files).

    Parameters
    ----------
    rel
        A path relative to the state location (or any path ending in that shape).

    Runs on
    -------
    driver (retention)"""
    parts = rel.rsplit("/", 3)
    if len(parts) < 3:
        return None
    pdir, sub, name = parts[-3], parts[-2], parts[-1]
    kind = ARTIFACT_DIRS.get(sub)
    if kind is None or not pdir.startswith("p=") or not pdir[2:].isdigit():
        return None
    version = _version_of(name)
    return None if version is None else (kind, version)


def unreferenced(rels: Iterable[str], keep: set[str], latest: int,
                 ) -> tuple[list[str], dict[str, int]]:
    """Artifacts among ``rels`` (location-relative paths) that may be deleted: not in ``keep``
    and of a version ``<= latest``. Returns them and counts ``{"manifests", "files",
    "in_flight"}`` (``in_flight``: artifacts of versions > latest, left alone).

    Parameters
    ----------
    rels
        Location-relative paths listed under the partition directories.
    keep
        Paths a retained version references.
    latest
        The newest decided version; anything newer may belong to a running attempt.

    Runs on
    -------
    driver (retention)"""
    doomed: list[str] = []
    counts = {"manifests": 0, "files": 0, "in_flight": 0}
    for rel in rels:
        found = artifact_of(rel)
        if found is None or rel in keep:
            continue
        kind, version = found
        if version > latest:
            counts["in_flight"] += 1
            continue
        doomed.append(rel)
        counts[kind] += 1
    return doomed, counts


def drop_listings(fs: Any, root: str) -> None:
    """Forget cached directory listings at and under ``root``.

    fsspec filesystems are shared per process (instance cache) and s3fs answers ``info`` /
    ``cat_file`` from a cached listing of the parent directory: a listing left behind by
    retention would make a manifest created later (by an executor, a new batch) look missing.

    Parameters
    ----------
    fs
        The fsspec filesystem (one without a ``dircache`` is left alone).
    root
        The path whose cached listings to drop, with everything under it.

    Runs on
    -------
    driver (retention)
    """
    cache = getattr(fs, "dircache", None)
    if cache is None:
        return
    root = root.rstrip("/")
    for key in [k for k in list(cache) if k == root or k.startswith(root + "/")]:
        cache.pop(key, None)
    fs.invalidate_cache(root)


def _list(fs: Any, path: str) -> list[str]:
    fs.invalidate_cache(path)
    try:
        return [p.rstrip("/") for p in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return []
    finally:
        drop_listings(fs, path)


def cleanup_partition(fs: Any, root: str, index: VersionIndex, partition: int,
                      keep_last: int) -> dict[str, int]:
    """Apply retention to one partition; returns counts of deleted versions/manifests/files.

    Version records older than the last ``keep_last`` are forgotten first (a reader never
    finds a record whose files are gone), then unreferenced artifacts of decided versions
    are deleted.

    Parameters
    ----------
    fs, root
        The state location's filesystem and root path.
    index
        Where versions are published.
    partition
        The partition to clean.
    keep_last
        Published versions to keep (at least 1).

    Raises
    ------
    OptionError
        ``keep_last`` is below 1.

    Runs on
    -------
    driver (``StateStore.cleanup``)"""
    if keep_last < 1:
        raise OptionError(f"keep_last={keep_last}: at least 1 version must be kept")
    published = index.versions(partition)
    if not published:
        return {"versions": 0, "manifests": 0, "files": 0}
    latest = published[-1]
    retained = published[-keep_last:]
    keep: set[str] = set()
    for version in retained:
        rel = index.resolve(partition, version)
        if rel is None:
            continue
        keep.add(rel)
        keep.update(e.remote for e in read_manifest(fs, root, rel).remote_entries()
                    if e.remote is not None)
    pdir = StateLocation.partition_dir(partition)
    deleted = {"versions": 0, "manifests": 0, "files": 0}
    # Forget old versions first: a reader never finds a record whose files are gone.
    for version in published[:-keep_last]:
        index.forget(partition, version)
        deleted["versions"] += 1
    rels = [path[len(root) + 1:] if path.startswith(root + "/") else path
            for sub in ARTIFACT_DIRS for path in _list(fs, f"{root}/{pdir}/{sub}")]
    doomed, counts = unreferenced(rels, keep, latest)
    deleted["manifests"], deleted["files"] = counts["manifests"], counts["files"]
    if doomed:
        fs.rm([f"{root}/{rel}" for rel in doomed])
    return deleted
