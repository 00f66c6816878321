"""Read a Delta table's log as the pack's batch log: ``DeltaBatchLog`` and ``open_batch_log``.

``DeltaBatchLog`` is ``CommitLog``'s read API over ``<table>/_delta_log`` (one GET per
version, the most recently used cached): each version is a ``CommitRecord`` (batch id, writer
id, token, schema, ``extra`` of ``commitInfo["orderedstream"]``). It runs on the driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orderedstream.core import lazys3, objectstore
from orderedstream.core.commitlog import CommitLog, CommitRecord
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CorruptLogError, OptionError, StateNotFoundError
from orderedstream.core.storage import read_object
from orderedstream.sinks.deltafiles import delta_storage_options, log_path
from orderedstream.sinks.writer import escape_partition_value

DELTA_LOG = "_delta_log"
COMMIT_KEY = "orderedstream"
FORMAT = 1
_DIGITS = 20


@dataclass(frozen=True)
class DeltaEntry:
    """One Delta version read back: the ``record`` plus Delta-only facts."""

    record: CommitRecord
    offsets: dict[str, list[int]] = field(default_factory=dict)
    """Kafka ``topic/partition`` -> ``[first, end)`` offsets the batch covered."""
    transactions: dict[str, int] = field(default_factory=dict)
    """Application transactions (``appId`` -> ``version``) the commit carries."""
    operation: str = ""


def _file(add: Mapping[str, Any]) -> DataFile:
    stats_text = add.get("stats")
    stats = json.loads(stats_text) if isinstance(stats_text, str) and stats_text else None
    rows = int((stats or {}).get("numRecords") or 0)
    partition = {str(k): escape_partition_value(v)
                 for k, v in (add.get("partitionValues") or {}).items()}
    return DataFile(path=log_path(str(add["path"])), size=int(add.get("size") or 0), rows=rows,
                    partition=partition, stats=stats)


def parse_version(data: bytes, version: int, where: str) -> DeltaEntry:
    """One ``_delta_log/<version>.json`` as a ``DeltaEntry``.

    Parameters
    ----------
    data
        The log entry's bytes (JSON lines).
    version, where
        Its Delta version, and how the error names it (its path).

    Returns
    -------
    DeltaEntry

    Raises
    ------
    CorruptLogError
        ``data`` is not a valid Delta log entry."""
    info: dict[str, Any] = {}
    files: list[DataFile] = []
    removes: list[str] = []
    txns: dict[str, int] = {}
    try:
        for line in data.decode().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"] or {}
            elif "add" in action:
                files.append(_file(action["add"]))
            elif "remove" in action:
                removes.append(log_path(str(action["remove"]["path"])))
            elif "txn" in action:
                txns[str(action["txn"]["appId"])] = int(action["txn"]["version"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptLogError(f"{where} is not a valid Delta log entry ({exc!r})") from None
    ours = info.get(COMMIT_KEY)
    ours = ours if isinstance(ours, dict) else {}
    batch = ours.get("batch_id")
    record = CommitRecord(
        version=version, batch_id=None if batch is None else int(batch), epoch=0,
        writer_id=str(ours.get("writer_id") or info.get("engineInfo") or "delta"),
        token=str(ours.get("token") or ""), files=tuple(files), removes=tuple(removes),
        schema=ours.get("schema"), extra=dict(ours.get("extra") or {}),
        created_at=float(info.get("timestamp") or 0) / 1000.0)
    offsets = {str(k): [int(v[0]), int(v[1])] for k, v in (ours.get("offsets") or {}).items()}
    return DeltaEntry(record=record, offsets=offsets, transactions=txns,
                      operation=str(info.get("operation") or ""))


class DeltaBatchLog:
    """The ``CommitLog`` read API over a Delta table's log (driver side, cached).

    ``writer_id``: when set, only this application id's commits count as batch records (a
    table written by several streams numbers each stream's batches independently). ``upto``: a
    newest version the caller has just looked up (None: ``latest_version()``). ``cache_entries``:
    parsed versions kept, the most recently used (decision 0027). Any method that reads a log
    entry that is not valid Delta JSON raises ``CorruptLogError``."""

    CACHE_ENTRIES = 128

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 writer_id: str | None = None, cache_entries: int | None = None) -> None:
        self.url, self.storage_options = url.rstrip("/"), dict(storage_options or {})
        self.writer_id = writer_id
        self.fs, root = lazys3.url_to_fs(self.url, self.storage_options)  # s3fs when needed
        self.root = root.rstrip("/")
        self.log_dir = f"{self.root}/{DELTA_LOG}"
        self._cache: dict[int, DeltaEntry] = {}
        self._cache_entries = max(1, cache_entries or self.CACHE_ENTRIES)
        self._hint: int | None = None

    def _path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{_DIGITS}d}.json"

    def _mine(self, entry: DeltaEntry) -> DeltaEntry:
        record = entry.record
        if (record.batch_id is not None and self.writer_id is not None
                and record.writer_id != self.writer_id):
            return DeltaEntry(record=CommitRecord(
                version=record.version, batch_id=None, epoch=0, writer_id=record.writer_id,
                token=record.token, files=record.files, removes=record.removes,
                schema=record.schema, extra=record.extra, created_at=record.created_at),
                offsets=entry.offsets, transactions=entry.transactions,
                operation=entry.operation)
        return entry

    def entry(self, version: int) -> DeltaEntry | None:
        """Delta version ``version`` (cached), or None when it is missing or cleaned up.

        Parameters
        ----------
        version
            A Delta version.

        Returns
        -------
        DeltaEntry or None"""
        if (cached := self._cache.pop(version, None)) is not None:
            self._cache[version] = cached  # the most recently used last
            return cached
        # s3fs may answer from a cached listing: drop it, or a new version looks missing
        self.fs.invalidate_cache(self.log_dir)
        try:
            data = read_object(self.fs, self._path(version))
        except FileNotFoundError:
            return None
        found = self._mine(parse_version(data, version, self._path(version)))
        self._cache[version] = found
        while len(self._cache) > self._cache_entries:
            del self._cache[next(iter(self._cache))]
        return found

    def read_version(self, version: int) -> CommitRecord | None:
        """The record of Delta version ``version``, or None (see ``entry``).

        Parameters
        ----------
        version
            A Delta version.

        Returns
        -------
        CommitRecord or None"""
        found = self.entry(version)
        return None if found is None else found.record

    def exists(self) -> bool:
        """Whether the table has a version."""
        return self.latest_version() is not None

    def latest_version(self) -> int | None:
        """Newest Delta version, or None before the table exists: from the version known, else
        ``_last_checkpoint``, else one LIST, then GETs probe the next versions (they only grow)."""
        if self._hint is None:
            self._hint = self._start_version()
            if self._hint is None:
                return None
        version = self._hint
        while self.entry(version + 1) is not None:
            version += 1
        self._hint = version
        return version if version >= 0 else None

    def _start_version(self) -> int | None:
        self.fs.invalidate_cache(self.log_dir)
        try:
            found = json.loads(read_object(self.fs, f"{self.log_dir}/_last_checkpoint"))
            return int(found["version"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass
        names = self._list_log()
        if names is None:
            return None
        versions = [int(n.rsplit("/", 1)[-1][:-5]) for n in names
                    if n.endswith(".json") and n.rsplit("/", 1)[-1][:-5].isdigit()]
        return max(versions) if versions else -1

    def _list_log(self) -> list[str] | None:
        """The names of the log folder's objects (None when it does not exist): through
        obstore on S3 (no s3fs import: docs/decisions/0013-obstore-for-small-puts.md)."""
        found = objectstore.find(self.fs, self.log_dir)
        if found is not None:
            prefix = self.log_dir.rstrip("/") + "/"
            names = [n for n in found if n.startswith(prefix) and "/" not in n[len(prefix):]]
            return names or None
        try:
            self.fs.invalidate_cache(self.log_dir)
            return list(self.fs.ls(self.log_dir, detail=False))
        except FileNotFoundError:
            return None
        finally:
            self.fs.invalidate_cache(self.log_dir)  # never leave a listing for others to trust

    def refresh(self) -> None:
        """Look for new versions (the next ``latest_version`` probes forward; no re-listing)."""

    def entries(self, start: int = 0, end: int | None = None) -> Iterator[DeltaEntry]:
        """Entries of versions ``start``..``end``, oldest first, skipping cleaned-up ones.

        Parameters
        ----------
        start, end
            The first and last version; ``end`` None: the latest.

        Returns
        -------
        Iterator of DeltaEntry"""
        last = self.latest_version() if end is None else end
        if last is None:
            return
        for version in range(max(0, start), last + 1):
            found = self.entry(version)
            if found is not None:
                yield found

    def records(self, start: int = 0, end: int | None = None) -> Iterator[CommitRecord]:
        """The records of ``entries(start, end)``, oldest first.

        Parameters
        ----------
        start, end
            The first and last version; ``end`` None: the latest.

        Returns
        -------
        Iterator of CommitRecord"""
        for found in self.entries(start, end):
            yield found.record

    def batch_entry(self, batch_id: int, *, upto: int | None = None) -> DeltaEntry | None:
        """The entry of streaming batch ``batch_id`` (scanning back from ``upto``), or None.

        Parameters
        ----------
        batch_id
            The streaming batch id.
        upto
            The version to scan back from.

        Returns
        -------
        DeltaEntry or None"""
        version = self.latest_version() if upto is None else upto
        while version is not None and version >= 0:
            found = self.entry(version)
            if found is not None and found.record.batch_id is not None:
                if found.record.batch_id == batch_id:
                    return found
                if found.record.batch_id < batch_id:
                    return None
            version -= 1
        return None

    def get(self, batch_id: int) -> CommitRecord | None:
        """The record of streaming batch ``batch_id``, or None when it is not committed.

        Parameters
        ----------
        batch_id
            The streaming batch id.

        Returns
        -------
        CommitRecord or None"""
        found = self.batch_entry(batch_id)
        return None if found is None else found.record

    def latest_batch_entry(self, *, upto: int | None = None) -> DeltaEntry | None:
        """The entry of the newest streaming batch, or None before the first batch.

        Parameters
        ----------
        upto
            The version to scan back from.

        Returns
        -------
        DeltaEntry or None"""
        version = self.latest_version() if upto is None else upto
        while version is not None and version >= 0:
            found = self.entry(version)
            if found is not None and found.record.batch_id is not None:
                return found
            version -= 1
        return None

    def latest_batch_record(self) -> CommitRecord | None:
        """The record of the newest streaming batch, or None before the first batch."""
        found = self.latest_batch_entry()
        return None if found is None else found.record

    def latest(self) -> int | None:
        """The newest committed batch id, or None before the first batch."""
        record = self.latest_batch_record()
        return None if record is None else record.batch_id


class DeltaOutput:
    """The committed rows of a Delta table, read with delta-rs (``to_arrow()`` like
    ``FencedTable``): the files the current version adds, never an orphan. Both methods raise
    delta-rs's ``TableNotFoundError`` when there is no Delta table at ``url``."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})

    def delta_table(self) -> Any:
        """The delta-rs ``DeltaTable`` at its latest version."""
        from deltalake import DeltaTable

        return DeltaTable(self.url,
                          storage_options=delta_storage_options(self.url, self.storage_options))

    def to_arrow(self) -> Any:
        """Every committed row, as a ``pyarrow.Table`` in the table's own Arrow schema.

        Read by delta-rs's engine (DataFusion), not ``to_pyarrow_table()``, whose Python
        filesystem handler can abort a process exiting right after the scan (docs/outputs.md).

        Returns
        -------
        pyarrow.Table"""
        import pyarrow as pa
        from deltalake import QueryBuilder

        table = self.delta_table()
        schema = pa.schema(table.schema().to_arrow())  # string, not DataFusion's string_view
        rows = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t"))
        return rows.select(schema.names).cast(schema)


BatchLog = CommitLog | DeltaBatchLog


def table_format(url: str, storage_options: Mapping[str, Any] | None = None
                 ) -> Literal["delta", "parquet"] | None:
    """Which table ``url`` holds: ``"delta"`` (``_delta_log``), ``"parquet"`` (``_fenced``).

    Parameters
    ----------
    url, storage_options
        A table root and the pack's storage options for it.

    Returns
    -------
    ``"delta"``, ``"parquet"`` or None
        None when neither exists yet."""
    fs, root = lazys3.url_to_fs(url.rstrip("/"), storage_options)  # obstore: no s3fs import
    root = root.rstrip("/")
    for name, kind in ((DELTA_LOG, "delta"), ("_fenced", "parquet")):
        found = objectstore.exists_under(fs, f"{root}/{name}")
        if found is None:  # not through obstore: fsspec, its listing cache dropped first
            fs.invalidate_cache(root)  # s3fs answers exists() from the parent's listing
            fs.invalidate_cache(f"{root}/{name}")
            found = fs.exists(f"{root}/{name}")
        if found:
            return kind  # type: ignore[return-value]
    return None


def check_no_other_format(url: str, storage_options: Mapping[str, Any] | None, *,
                          writing: Literal["delta", "parquet"], who: str) -> None:
    """Refuse to write ``writing`` where ``url`` already holds the other format: two logs in
    one folder, each blind to the other's files (a vacuum of one deletes the other's data).

    Parameters
    ----------
    url, storage_options
        The output location and the pack's storage options for it.
    writing
        The format about to be written.
    who
        How the error names the writer (e.g. ``"format('fenceddelta')"``).

    Raises
    ------
    OptionError
        ``url`` holds a table of the other format."""
    found = table_format(url, storage_options)
    if found is None or found == writing:
        return
    names = {"delta": f"a Delta table ({DELTA_LOG}/)", "parquet": "a fenced Parquet table "
             "(_fenced/)"}
    raise OptionError(f"{url} holds {names[found]}; {who} writes {names[writing]}, which "
                      f"would sit beside it, each log blind to the other's files. Write "
                      f"'{found}' there, or give another output location")


def open_batch_log(url: str, storage_options: Mapping[str, Any] | None = None, *,
                   writer_id: str | None = None) -> BatchLog:
    """The batch log of the table at ``url``, by what it holds (``table_format``).

    Parameters
    ----------
    url, storage_options
        The table root and the pack's storage options for it.
    writer_id
        Delta only: the application id whose commits count as batch records; None: any.

    Returns
    -------
    DeltaBatchLog or CommitLog

    Raises
    ------
    StateNotFoundError
        ``url`` holds neither table."""
    kind = table_format(url, storage_options)
    if kind == "delta":
        return DeltaBatchLog(url, storage_options, writer_id=writer_id)
    if kind == "parquet":
        return CommitLog(url, storage_options)
    raise StateNotFoundError(f"{url} holds no table: neither a Delta log ({DELTA_LOG}/) nor a "
                             "fenced Parquet log (_fenced/); check the URL and storage options")


__all__ = ["COMMIT_KEY", "DELTA_LOG", "BatchLog", "DeltaBatchLog", "DeltaEntry", "DeltaOutput",
           "open_batch_log", "parse_version", "table_format"]
