"""Maintenance of a fenced Parquet table: compaction (few large files from many small ones)
and vacuum (delete files no version needs any more). Client/driver side.

Compaction rewrites each partition's small committed files into files of about
``target_file_bytes`` and publishes ONE maintenance record that adds the new files and
retires the old ones, so readers see the old set or the new set, never both or neither. The
record lands on a ``_spark_metadata`` compaction point (Spark 4's sink log cannot express a
removal elsewhere), with empty filler versions before it if needed. It runs beside a live
stream: appends and compactions commute.

Vacuum deletes (a) orphans: Parquet files no record lists (failed or replayed attempts,
fenced zombies), (b) files retired by a compaction, and (c) ``_spark_metadata`` entries Spark
no longer reads, each only when older than the grace period, so in-flight writes and readers
still using an older version are safe. Commit records are kept (they are the history the
state store and ``snapshot(version)`` read).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow.dataset as ds

from orderedstream.core.commitlog import CommitRecord
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import TableIntegrityError
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.table import DEFAULT_COMPACT_INTERVAL, SPARK_LOG_DIR, FencedTable
from orderedstream.sinks.writer import ParquetFileWriter


@dataclass(frozen=True)
class CompactionResult:
    """What ``compact`` did: its maintenance ``record`` (None: nothing to compact), the files
    it ``removed`` and ``added``, and the ``rows`` it rewrote."""

    record: CommitRecord | None
    removed: int
    added: int
    rows: int


def compact(url: str, storage_options: Mapping[str, Any] | None = None, *,
            target_file_bytes: int = 128 * 1024**2, min_files: int = 2,
            compression: str = "zstd", row_group_rows: int = 1_000_000,
            metadata_compact_interval: int = DEFAULT_COMPACT_INTERVAL) -> CompactionResult:
    """Rewrite small files (< target/2) of each partition holding at least ``min_files``.

    The rewritten files and the retired ones are published in one maintenance record at a
    ``_spark_metadata`` compaction point (see the module docstring); a live stream may go on
    writing meanwhile.

    Parameters
    ----------
    url
        The fenced table's root.
    storage_options
        fsspec options for ``url``.
    target_file_bytes
        The size of the rewritten files; files under half of it are small.
    min_files
        A partition is rewritten only from this many small files.
    compression
        The rewritten files' Parquet codec.
    row_group_rows
        Rows per row group of the rewritten files.
    metadata_compact_interval
        The table's ``_spark_metadata`` compaction interval, in versions.

    Returns
    -------
    CompactionResult
        Its ``record`` is None when nothing was compacted.

    Raises
    ------
    TableIntegrityError
        The rewritten rows differ from what the records list; nothing is published.
    CommitConflictError
        A newer version already retired one of the files.
    CorruptLogError
        A record or ``_spark_metadata`` entry cannot be read.

    Runs on
    -------
    driver"""
    table = FencedTable(url, storage_options)
    snap = table.snapshot()
    if snap.version is None or snap.schema is None:
        return CompactionResult(None, 0, 0, 0)
    table.sync_spark_metadata(metadata_compact_interval)
    groups: dict[tuple[tuple[str, str], ...], list[DataFile]] = defaultdict(list)
    for file in snap.files:
        if file.size < target_file_bytes // 2:
            groups[tuple(file.partition.items())].append(file)
    parts = snap.partition_columns
    data_schema = snap.schema
    for col in parts:
        data_schema = data_schema.remove(data_schema.get_field_index(col))
    added: list[DataFile] = []
    removed: list[str] = []
    rows = 0
    for key, files in groups.items():
        if len(files) < min_files:
            continue
        subdir = "/".join(f"{c}={v}" for c, v in key)
        options = FencedParquetOptions.from_mapping({
            "path": f"{table.url}/{subdir}" if subdir else table.url,
            "storage_options": dict(storage_options or {}), "compression": compression,
            "row_group_rows": row_group_rows, "target_file_bytes": target_file_bytes})
        source = ds.dataset([table.full_path(f.path) for f in files], schema=data_schema,
                            format="parquet", filesystem=table.fs)
        written = ParquetFileWriter(options, "compact").write(
            source.to_batches(batch_size=64 * 1024))
        for new in written:
            added.append(replace(new, path=f"{subdir}/{new.path}" if subdir else new.path,
                                 partition=dict(key)))
        removed += [f.path for f in files]
        before, after = sum(f.rows for f in files), sum(f.rows for f in written)
        if before != after:
            raise TableIntegrityError(
                f"compaction of {subdir or 'root'} of {table.url} wrote {after} rows from "
                f"{len(files)} files whose records list {before}; nothing was published "
                "(run `verify`: a file may have been replaced outside the log)")
        rows += after
    if not removed:
        return CompactionResult(None, 0, 0, 0)
    record = table.log.commit_change(
        snap.version, added, removed, extra={"compaction": {"removed": len(removed)}},
        only_at=lambda v: (v + 1) % metadata_compact_interval == 0)
    table.sync_spark_metadata(metadata_compact_interval)
    return CompactionResult(record, len(removed), len(added), rows)


@dataclass(frozen=True)
class VacuumResult:
    """What ``vacuum`` deleted (or, in a dry run, would delete: paths relative to the root)
    and how many unreferenced files it kept as younger than the grace period."""

    deleted: tuple[str, ...]
    kept_recent: int


def vacuum(url: str, storage_options: Mapping[str, Any] | None = None, *,
           grace_seconds: float = 24 * 3600, dry_run: bool = False,
           now: float | None = None) -> VacuumResult:
    """Delete orphan and retired Parquet files older than ``grace_seconds``.

    Also deletes ``_spark_metadata`` entries Spark no longer reads, past the same grace
    period; commit records are kept. A file whose age is unknown counts as new.

    Parameters
    ----------
    url
        The fenced table's root.
    storage_options
        fsspec options for ``url``.
    grace_seconds
        Only files older than this (since written, or since retired) are deleted.
    dry_run
        List what would be deleted, delete nothing.
    now
        The time ages are measured from, in seconds since the epoch; None: now.

    Returns
    -------
    VacuumResult
        The paths deleted (or to delete), sorted, and the count kept as too young.

    Raises
    ------
    CorruptLogError
        A commit record cannot be read.

    Runs on
    -------
    driver"""
    table = FencedTable(url, storage_options)
    now = time.time() if now is None else now
    records = list(table.log.records()) if table.log.latest_version() is not None else []
    live = {f.path for f in table.snapshot().files}
    retired_at = {p: r.created_at for r in records for p in r.removes}
    deleted, kept = [], 0
    for path, info in table.fs.find(table.root, detail=True).items():
        rel = path[len(table.root):].lstrip("/")
        if any(seg.startswith(("_", ".")) for seg in rel.split("/")):
            continue
        if not rel.endswith(".parquet") or rel in live:
            continue
        modified = _mtime(info)
        since = max(modified, retired_at.get(rel, 0.0))
        if now - since < grace_seconds:
            kept += 1
            continue
        deleted.append(rel)
    deleted += _expired_spark_log(table, now, grace_seconds)
    if not dry_run and deleted:
        table.fs.rm([table.full_path(r) for r in deleted])
    return VacuumResult(tuple(sorted(deleted)), kept)


def _expired_spark_log(table: FencedTable, now: float, grace_seconds: float) -> list[str]:
    """``_spark_metadata`` entries before the second-newest ``.compact`` (Spark reads from the
    newest compact on, and derives the interval from the newest two), past the grace period."""
    directory = f"{table.root}/{SPARK_LOG_DIR}"
    try:
        table.fs.invalidate_cache(directory)
        infos = table.fs.ls(directory, detail=True)
    except FileNotFoundError:
        return []
    entries = {}
    for info in infos:
        name = info["name"].rsplit("/", 1)[-1]
        if name.removesuffix(".compact").isdigit():
            entries[name] = info
    compacts = sorted(int(n.removesuffix(".compact")) for n in entries if n.endswith(".compact"))
    if len(compacts) < 3:
        return []
    keep_from = compacts[-2]
    return [f"{SPARK_LOG_DIR}/{name}" for name, info in entries.items()
            if int(name.removesuffix(".compact")) < keep_from
            and now - _mtime(info) >= grace_seconds]


def _mtime(info: Mapping[str, Any]) -> float:
    value = info.get("LastModified") or info.get("mtime") or info.get("created")
    if value is None:
        return time.time()  # unknown: treat as new (never delete by guess)
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value)
