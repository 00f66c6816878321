"""The committed view of a fenced Parquet table: live files, schema, readers, Spark's log.

A snapshot replays the commit records (``orderedstream.core.commitlog``) up to a version: files
added by batches, minus files retired by compactions. Readers built from it (pyarrow dataset,
pandas, DuckDB) see exactly the committed rows. ``_spark_metadata`` is derived from the same
records, after them, so ``spark.read.parquet(<root>)`` agrees; it is never consulted as the truth.

Driver/client-side code (holds a filesystem client).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa

from orderedstream.core import storage
from orderedstream.core.commitlog import CommitLog, CommitRecord
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CorruptLogError
from orderedstream.sinks.schema import decode_schema

if TYPE_CHECKING:  # pyarrow.dataset imports pandas: not at import (Spark's data source lookup)
    import pyarrow.dataset as ds

SPARK_LOG_DIR = "_spark_metadata"
DEFAULT_COMPACT_INTERVAL = 10


@dataclass(frozen=True)
class Snapshot:
    """The live files and schema of one table version (None: empty table)."""

    version: int | None
    files: tuple[DataFile, ...]
    schema: pa.Schema | None

    @property
    def rows(self) -> int:
        """The rows of the live files, from their records."""
        return sum(f.rows for f in self.files)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        """The Hive partition columns, in directory order (from a live file; () when none)."""
        return tuple(self.files[0].partition) if self.files else ()


def apply_records(records: list[CommitRecord], base: Mapping[str, DataFile] | None = None,
                  ) -> dict[str, DataFile]:
    """Live files after applying ``records`` in order to ``base``: each record's removes,
    then its files.

    Parameters
    ----------
    records
        Commit records, oldest first.
    base
        Live files before the first record (relative path -> descriptor); None: an empty
        table.

    Returns
    -------
    dict
        Relative path -> ``DataFile`` (a new dict; ``base`` is not changed).

    Runs on
    -------
    driver"""
    live: dict[str, DataFile] = dict(base or {})
    for record in records:
        for path in record.removes:
            live.pop(path, None)
        for file in record.files:
            live[file.path] = file
    return live


class FencedTable:
    """Read side and derived metadata of the table at ``url``."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 log: CommitLog | None = None) -> None:
        self.log = log or CommitLog(url, storage_options)
        self.url = self.log.url
        self.fs = self.log.fs
        self.root = self.log.root

    def snapshot(self, version: int | None = None) -> Snapshot:
        """Live files and schema at ``version``: the newest live-set checkpoint at or before
        it plus the records after it.

        Parameters
        ----------
        version
            The table version; None: the latest.

        Returns
        -------
        Snapshot
            ``Snapshot(None, (), None)`` for a table without versions.

        Raises
        ------
        CorruptLogError
            A record cannot be read, or the record of ``version`` is missing.

        Runs on
        -------
        driver"""
        last = self.log.latest_version() if version is None else version
        if last is None:
            return Snapshot(None, (), None)
        base = self._checkpoint_at_or_before(last)
        live: dict[str, DataFile] = {}
        first = 0
        if base is not None:
            live = {f.path: f for f in base[1]}
            first = base[0] + 1
        records = list(self.log.records(first, last))
        live = apply_records(records, live)
        newest = records[-1] if records else self.log.read_version(last)
        if newest is None:
            raise CorruptLogError(f"commit record {last} of {self.url} vanished")
        return Snapshot(last, tuple(live.values()),
                        None if newest.schema is None else decode_schema(newest.schema))

    # ---- live-set checkpoints (derived, like _spark_metadata's .compact files) -----------
    def _checkpoint_path(self, version: int) -> str:
        return f"{self.log.meta}/checkpoints/{version:020d}.json"

    def _checkpoint_at_or_before(self, version: int) -> tuple[int, list[DataFile]] | None:
        try:
            self.fs.invalidate_cache(f"{self.log.meta}/checkpoints")
            names = self.fs.ls(f"{self.log.meta}/checkpoints", detail=False)
        except FileNotFoundError:
            return None
        versions = sorted((int(n.rsplit("/", 1)[-1][:-5]) for n in names
                           if n.endswith(".json") and n.rsplit("/", 1)[-1][:-5].isdigit()),
                          reverse=True)
        for candidate in versions:
            if candidate <= version:
                data = json.loads(self.fs.cat_file(self._checkpoint_path(candidate)))
                return candidate, [DataFile.from_dict(f) for f in data["files"]]
        return None

    def write_checkpoint(self, version: int) -> None:
        """Record the live set at ``version`` so snapshots need not replay every record.

        Parameters
        ----------
        version
            A committed version. Its checkpoint is created exclusively: one already there
            (deterministic, so the same) is left as it is.

        Raises
        ------
        CorruptLogError
            A record up to ``version`` cannot be read.

        Runs on
        -------
        driver"""
        snap = self.snapshot(version)
        body = json.dumps({"version": version, "files": [f.to_dict() for f in snap.files]},
                          sort_keys=True).encode()
        storage.create_exclusive(self.fs, self._checkpoint_path(version), body)

    def full_path(self, rel: str) -> str:
        """The filesystem path of ``rel`` (``self.fs``'s form, no scheme).

        Parameters
        ----------
        rel
            A path relative to the table root.

        Returns
        -------
        str
            ``<root>/<rel>``.

        Runs on
        -------
        driver"""
        return f"{self.root}/{rel}"

    # ---- Python readers ----------------------------------------------------------------
    def dataset(self, version: int | None = None) -> ds.Dataset:
        """A pyarrow dataset over exactly the committed files (Hive partition columns typed
        from the table schema). Empty table: an empty in-memory dataset.

        Parameters
        ----------
        version
            The table version; None: the latest.

        Returns
        -------
        pyarrow.dataset.Dataset
            In the table's schema (no columns before the first version).

        Raises
        ------
        CorruptLogError
            A record cannot be read.

        Runs on
        -------
        driver"""
        import pyarrow.dataset as ds

        snap = self.snapshot(version)
        if snap.schema is None:
            return ds.dataset(pa.table({}))
        parts = snap.partition_columns
        partitioning = (ds.partitioning(pa.schema([snap.schema.field(c) for c in parts]),
                                        flavor="hive") if parts else None)
        if not snap.files:
            return ds.dataset(snap.schema.empty_table())
        return ds.dataset([self.full_path(f.path) for f in snap.files], schema=snap.schema,
                          format="parquet", filesystem=self.fs, partitioning=partitioning,
                          partition_base_dir=self.root)

    def to_arrow(self, version: int | None = None) -> pa.Table:
        """Every committed row at ``version``, read from ``dataset``.

        Parameters
        ----------
        version
            The table version; None: the latest.

        Returns
        -------
        pyarrow.Table
            The rows, in the table's schema.

        Raises
        ------
        CorruptLogError
            A record cannot be read.

        Runs on
        -------
        driver"""
        return self.dataset(version).to_table()

    # ---- Spark's _spark_metadata log (derived) -----------------------------------------
    def spark_uri(self, rel: str) -> str:
        """The URI Spark should read ``rel`` at: s3 -> s3a (hadoop-aws), local -> file:.

        Parameters
        ----------
        rel
            A path relative to the table root (Hive-escaped partition directories).

        Returns
        -------
        str
            The URI, escaped as Hadoop's ``Path.toUri()`` would escape it.

        Runs on
        -------
        driver"""
        # Hadoop reads these as URIs: escape what Path.toUri() would (%, space, ...), so an
        # escaped partition value such as p=a%2Fb survives the round trip.
        path = quote(self.full_path(rel), safe="/=:@!$&'()*+,;-._~")
        if storage.is_s3(self.fs):
            return f"s3a://{path}"
        if storage.is_local(self.fs):
            return f"file://{path}"
        proto = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        return f"{proto}://{path}"

    def _spark_entry(self, file: DataFile, record_time: float) -> str:
        return json.dumps({"path": self.spark_uri(file.path), "size": file.size, "isDir": False,
                           "modificationTime": int(record_time * 1000), "blockReplication": 1,
                           "blockSize": 134217728, "action": "add"}, separators=(",", ":"))

    def spark_log_latest(self) -> int | None:
        """The newest ``_spark_metadata`` entry's version (plain or ``.compact``), or None
        when there is none."""
        directory = f"{self.root}/{SPARK_LOG_DIR}"
        try:
            self.fs.invalidate_cache(directory)
            names = self.fs.ls(directory, detail=False)
        except FileNotFoundError:
            return None
        ids = []
        for name in names:
            base = name.rsplit("/", 1)[-1].removesuffix(".compact")
            if base.isdigit():
                ids.append(int(base))
        return max(ids) if ids else None

    def _read_spark_entries(self, name: str) -> dict[str, str]:
        """Entries of one ``_spark_metadata`` file: Spark URI -> JSON line."""
        path = f"{self.root}/{SPARK_LOG_DIR}/{name}"
        try:
            lines = self.fs.cat_file(path).decode().splitlines()
            if not lines or lines[0] != "v1":
                raise CorruptLogError(f"{path} is not a v1 log file")
            return {json.loads(line)["path"]: line for line in lines[1:] if line.strip()}
        except (FileNotFoundError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise CorruptLogError(f"{path} cannot be read as a Spark sink log file ({exc!r}); "
                                  "remove _spark_metadata to have it derived again") from None

    def sync_spark_metadata(self, interval: int = DEFAULT_COMPACT_INTERVAL,
                            upto: int | None = None) -> int:
        """Write ``_spark_metadata/<v>`` for every version not yet there; return how many.

        Version v's entry lists the files v added; every ``interval``-th entry
        (``(v + 1) % interval == 0``) is ``<v>.compact`` listing all live files: the previous
        compact entry plus the versions since, minus removed files. That is the only way a
        compaction's removals reach Spark (Spark 4's sink log has no delete action), so
        compactions are committed at such versions only (see maintenance). Entries are
        created exclusively and deterministically, so concurrent syncs agree. Reads only the
        records since the previous compact entry (a fresh commit process stays cheap).

        Parameters
        ----------
        interval
            The compaction interval, in versions (at most 10 for Spark's readers).
        upto
            The newest version to derive; None: the latest.

        Returns
        -------
        int
            How many entries were written.

        Raises
        ------
        CorruptLogError
            A record vanished, an existing entry cannot be read, or a version that retires
            files is not a compaction point.

        Runs on
        -------
        driver"""
        last = self.log.latest_version() if upto is None else upto
        if last is None:
            return 0
        present = self.spark_log_latest()
        start = 0 if present is None else present + 1
        written = 0
        for version in range(start, last + 1):
            compact = (version + 1) % interval == 0
            if compact:
                previous = version - interval
                live: dict[str, str] = (self._read_spark_entries(f"{previous}.compact")
                                        if previous >= 0 else {})
                for record in self.log.records(previous + 1, version):
                    for rel in record.removes:
                        live.pop(self.spark_uri(rel), None)
                    for file in record.files:
                        live[self.spark_uri(file.path)] = self._spark_entry(file,
                                                                            record.created_at)
                lines = list(live.values())
                name = f"{version}.compact"
            else:
                single = self.log.read_version(version)
                if single is None:
                    raise CorruptLogError(f"commit record {version} of {self.url} vanished")
                if single.removes:
                    raise CorruptLogError(
                        f"version {version} of {self.url} retires files but is not a "
                        f"_spark_metadata compaction point (interval {interval}); Spark "
                        "readers cannot see removals there")
                lines = [self._spark_entry(f, single.created_at) for f in single.files]
                name = str(version)
            body = "\n".join(["v1", *lines]).encode()
            storage.create_exclusive(self.fs, f"{self.root}/{SPARK_LOG_DIR}/{name}", body)
            if compact:
                self.write_checkpoint(version)
            written += 1
        return written
