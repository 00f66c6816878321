"""Retention of the ordered stage's state, driven by the output table's commit log.

What the last ``keep_batches`` batch records name is kept, the rest up to the latest committed
batch is deleted; safe while the query runs or replays (see :class:`OrderedRetention`).
Driver-side; idempotent; safe to interrupt.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from orderedstream.core import lazys3, objectstore
from orderedstream.core.commitlog import CommitLog, CommitRecord
from orderedstream.core.errors import CorruptStateError, InvariantError, OptionError
from orderedstream.core.storage import is_s3, read_object
from orderedstream.statestore.manifest import Manifest
from orderedstream.statestore.ordered.plan import bases_from_extra, split_partition_id
from orderedstream.statestore.retention import drop_listings, unreferenced

_log = logging.getLogger("orderedstream.statestore.ordered")

DEFAULT_CLEANUP_INTERVAL_BATCHES = 10
"""Run retention after every 10th committed batch: with the default keep of 100, at most
~110 versions exist at a time, for one listing of the state location per 10 batches."""


def _positive(name: str, value: Any, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        accepted = "a positive integer" + (" or None" if allow_none else "")
        raise OptionError(f"OrderedStateful({name}={value!r}): {accepted} is required")
    return value


@dataclass(frozen=True, kw_only=True)
class RetentionPolicy:
    """How many batch records' state to keep and how often to apply it automatically.

    ``keep_batches``: state versions named by the last N batch commit records stay (default:
    the store option ``keep_last``, 100 like Spark's ``spark.sql.streaming.minBatchesToRetain``).
    ``cleanup_interval_batches``: run after each batch whose ``(batch_id + 1)`` is a multiple
    of it; None turns automatic cleanup off (``OrderedStateful.cleanup_state`` still works).
    ``background``: the automatic cleanup runs in a driver thread while the next batches run
    (``orderedstream.statestore.ordered.maintenance``); False runs it inside the due batch.
    """

    keep_batches: int
    cleanup_interval_batches: int | None = DEFAULT_CLEANUP_INTERVAL_BATCHES
    background: bool = True

    def __post_init__(self) -> None:
        _positive("keep_batches", self.keep_batches)
        _positive("cleanup_interval_batches", self.cleanup_interval_batches, allow_none=True)
        if not isinstance(self.background, bool):
            raise OptionError(f"OrderedStateful(cleanup_in_background={self.background!r}): "
                              "True (a driver thread cleans up beside the next batches) or "
                              "False (inside the due batch) is required")

    def due(self, batch_id: int) -> bool:
        """Whether automatic cleanup runs after committing a batch: when ``batch_id + 1`` is a
        multiple of ``cleanup_interval_batches`` (never when it is ``None``).

        Parameters
        ----------
        batch_id
            The batch just committed.

        Returns
        -------
        bool
            True when the cleanup is due.

        Runs on
        -------
        driver"""
        every = self.cleanup_interval_batches
        return every is not None and (batch_id + 1) % every == 0


@dataclass(frozen=True)
class RetentionResult:
    """What one cleanup did (also logged, logger ``orderedstream.statestore.ordered``)."""

    latest_batch: int | None
    """The newest committed batch id when the cleanup read the log (None: nothing yet)."""
    oldest_retained_batch: int | None
    """The oldest batch whose record's state versions were kept."""
    partitions: int
    """Kafka partitions named by the retained records."""
    manifests_retained: int
    files_retained: int
    manifests_deleted: int
    files_deleted: int
    in_flight: int
    """Artifacts of batch ids > ``latest_batch`` left alone (a running attempt may own them)."""
    objects_listed: int
    seconds: float

    @property
    def deleted(self) -> int:
        """Objects deleted: manifests and files."""
        return self.manifests_deleted + self.files_deleted

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict of its fields (what the cleanup logs).

        Returns
        -------
        dict[str, Any]
            Field name -> value."""
        return asdict(self)


def retained_batch_records(log: CommitLog, keep_batches: int) -> list[CommitRecord]:
    """The newest batch commit records, oldest first (maintenance records such as compactions
    or fillers carry no state and are skipped).

    Parameters
    ----------
    log
        The output table's batch log.
    keep_batches
        How many batch records to return at most.

    Returns
    -------
    list[CommitRecord]
        Up to ``keep_batches`` records; empty for an empty log.

    Runs on
    -------
    driver"""
    latest = log.latest_version()
    if latest is None:
        return []
    found: list[CommitRecord] = []
    end = latest
    while end >= 0 and len(found) < keep_batches:
        # what is still missing, with room for the maintenance versions between batches: a
        # cleanup reads about keep_batches versions, which the log's cache then holds
        start = max(0, end - retention_window(keep_batches - len(found)) + 1)
        chunk = [r for r in log.records(start, end) if r.batch_id is not None]
        found = chunk + found
        end = start - 1
    return found[-keep_batches:]


def retention_window(batches: int) -> int:
    """How many log versions a cleanup reads back at a time to find ``batches`` batch records:
    a few more than ``batches``, for the compactions and other writers' versions among them.

    Parameters
    ----------
    batches
        The batch records still wanted.

    Returns
    -------
    int
        Versions to read, at least 16."""
    return max(16, batches + batches // 8 + 8)


class OrderedRetention:
    """Applies commit-log-driven retention to one ``state_location`` (driver side).

    A batch record names every Kafka partition's manifest (the carried-forward map), so what
    is kept is every manifest the last ``keep_batches`` batch records name (an idle
    partition's old one too) and every file those manifests reference (snapshots share SSTs
    between versions). Everything else under ``topic=*/p=*/{manifests,sst}/`` whose batch id
    (the name's prefix) is at most the latest committed batch is deleted: older versions, and
    candidates of crashed, failed or fenced attempts. Artifacts of a later batch id are never
    touched: an attempt of the next batch may be writing them.

    Safe beside a running query: a batch starts from the latest record's manifests (kept); a
    replayed batch whose record exists is skipped without reading state. An SST kept by a
    later version either carries that version's batch id or was in its parent manifest, so a
    stale or concurrent cleanup never deletes what a newer batch needs. Each retained
    manifest's file set is cached (manifests never change), so a periodic cleanup reads only
    the manifests committed since the previous one.

    Parameters
    ----------
    log
        The output table's batch log.
    state_location
        The stage's state location URL.
    storage_options
        fsspec options for it.
    """

    def __init__(self, log: CommitLog, state_location: str,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.log = log
        self.state_location = state_location.rstrip("/")
        # obstore lists, reads and deletes where it serves the location: no s3fs in the driver
        self.fs, root = lazys3.url_to_fs(self.state_location, storage_options)
        self.root = root.rstrip("/")
        self._files_of: dict[str, frozenset[str]] = {}

    def retained(self, records: Iterable[CommitRecord]) -> tuple[set[str], set[str], int]:
        """What the records name: their manifests, the files those reference, their partitions.

        Reads the manifests not cached yet (concurrently where obstore serves the location).

        Parameters
        ----------
        records
            The retained batch records.

        Returns
        -------
        tuple[set[str], set[str], int]
            ``(manifests, files, partitions)``; paths relative to the state location
            (``topic=<t>/p=<P>/...``).

        Raises
        ------
        CorruptStateError
            A named manifest does not exist or is unreadable (nothing is deleted).
        OSError
            The store failed to return a manifest (the next cleanup retries).

        Runs on
        -------
        driver"""
        manifests: set[str] = set()
        pids: set[str] = set()
        for record in records:
            for pid, base in bases_from_extra(record.extra).items():
                if base.manifest is None:
                    continue
                topic, _ = split_partition_id(pid)
                manifests.add(f"topic={topic}/{base.manifest}")
                pids.add(pid)
        self._load_file_sets(sorted(m for m in manifests if m not in self._files_of))
        self._files_of = {m: self._files_of[m] for m in manifests}  # bounded: retained only
        files = set().union(*self._files_of.values()) if manifests else set()
        return manifests, files, len(pids)

    def _load_file_sets(self, manifests: list[str]) -> None:
        if not manifests:
            return
        paths = {f"{self.root}/{rel}": rel for rel in manifests}
        # obstore where it serves the location: concurrent GETs, little CPU per GET in this
        # process (docs/decisions/0013-obstore-for-small-puts.md)
        got: Mapping[str, Any] | None = objectstore.get_many(self.fs, list(paths))
        if got is None:
            for path in paths:
                self.fs.invalidate_cache(path)
            # On S3 one GET per manifest (s3fs would first HEAD each for its size).
            single = {"max_concurrency": 1} if is_s3(self.fs) else {}
            got = self.fs.cat(list(paths), on_error="return", **single)
        for path, rel in paths.items():
            raw = got.get(path)
            if raw is None:  # a filesystem that keys results differently: read it alone
                try:
                    raw = read_object(self.fs, path)
                except FileNotFoundError as exc:
                    raw = exc
            if isinstance(raw, FileNotFoundError):
                raise CorruptStateError(
                    f"state manifest {self.state_location}/{rel} is named by a retained commit "
                    f"record of {self.log.url} but does not exist ({raw}); cleanup stopped "
                    "without deleting anything. Was it removed by hand or by another tool?")
            if not isinstance(raw, bytes):  # the store failed (throttled, unreachable)
                first = str(raw).splitlines()[0] if str(raw) else type(raw).__name__
                raise OSError(
                    f"state manifest {self.state_location}/{rel} (named by a retained commit "
                    f"record of {self.log.url}) could not be read: {first}; cleanup stopped "
                    "without deleting anything (the next one retries)") from (
                    raw if isinstance(raw, BaseException) else None)
            topic_dir = rel.split("/", 1)[0]
            manifest = Manifest.from_json(raw, path)
            self._files_of[rel] = frozenset(f"{topic_dir}/{e.remote}"
                                            for e in manifest.remote_entries()
                                            if e.remote is not None)

    def _listing(self) -> list[str]:
        """Every object under the state location, relative to it (one recursive listing;
        through obstore where it serves the location: no botocore XML parsing in Python)."""
        paths = objectstore.find(self.fs, self.root)
        if paths is None:
            self.fs.invalidate_cache(self.root)
            try:
                paths = self.fs.find(self.root)
            except FileNotFoundError:
                return []
            finally:
                drop_listings(self.fs, self.root)  # never leave listings for others to trust
        prefix = self.root + "/"
        return [p[len(prefix):] for p in paths if p.startswith(prefix)
                and p[len(prefix):].startswith("topic=")]

    def run(self, keep_batches: int) -> RetentionResult:
        """Keep what the last ``keep_batches`` batch records name; delete the rest (manifests
        first, so an interrupted cleanup never leaves a manifest whose files are gone).

        Parameters
        ----------
        keep_batches
            How many of the newest batch records' state versions are kept (at least 1).

        Returns
        -------
        RetentionResult
            What was kept, deleted and listed (also logged).

        Raises
        ------
        OptionError
            ``keep_batches`` is not a positive integer.
        CorruptStateError
            A retained manifest is missing or unreadable (nothing is deleted).
        OSError
            The store failed to return a manifest or to delete.

        Runs on
        -------
        driver"""
        _positive("keep_batches", keep_batches)
        started = time.perf_counter()
        records = retained_batch_records(self.log, keep_batches)
        if not records:
            return RetentionResult(None, None, 0, 0, 0, 0, 0, 0, 0,
                                   time.perf_counter() - started)
        latest = records[-1].batch_id
        if latest is None:
            raise InvariantError(f"retained_batch_records returned maintenance version "
                                 f"{records[-1].version} of {self.log.url} as a batch record")
        manifests, files, partitions = self.retained(records)
        listed = self._listing()
        doomed, counts = unreferenced(listed, manifests | files, latest)
        # Manifests first: an interrupted cleanup leaves unreferenced files, never a manifest
        # whose files are gone (neither is named by a record; the next run finishes the job).
        manifests_first = [[f"{self.root}/{rel}" for rel in doomed if "/manifests/" in rel],
                           [f"{self.root}/{rel}" for rel in doomed if "/manifests/" not in rel]]
        for paths in manifests_first:
            if paths and not objectstore.delete_many(self.fs, paths):
                self.fs.rm(paths)
        result = RetentionResult(
            latest_batch=latest, oldest_retained_batch=records[0].batch_id,
            partitions=partitions, manifests_retained=len(manifests),
            files_retained=len(files), manifests_deleted=counts["manifests"],
            files_deleted=counts["files"], in_flight=counts["in_flight"],
            objects_listed=len(listed), seconds=time.perf_counter() - started)
        _log.info("ordered state cleanup at %s: %s", self.state_location,
                  json.dumps(result.to_dict(), sort_keys=True))
        return result


__all__ = ["DEFAULT_CLEANUP_INTERVAL_BATCHES", "OrderedRetention", "RetentionPolicy",
           "RetentionResult", "retained_batch_records"]
