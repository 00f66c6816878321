"""The batch commit log: ONE exclusive commit record per batch, the single point of truth.

Shared by the fenced Parquet sink and the ordered state store. Layout under the table root::

    _fenced/epoch.json              writer epoch, claimed by compare-and-swap (If-Match)
    _fenced/log/<version:020d>.json commit records, each created exclusively (If-None-Match: *)

Records form a dense sequence of table versions; a version is a streaming batch's commit
(``batch_id`` set) or a maintenance change such as a compaction (``batch_id`` None). Creating
version v exclusively serialises every writer, like Delta's log. Records are immutable;
``_spark_metadata`` is derived from them. ``CommitRecord`` and ``Epoch`` live in
``orderedstream.core.commitrecord`` (re-exported here).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from orderedstream.core import storage
from orderedstream.core.commitrecord import FORMAT_VERSION, CommitRecord, Epoch
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CommitConflictError, CorruptLogError, FencedError

META_DIR = "_fenced"
_VERSION_DIGITS = 20


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


class CommitLog:
    """Exclusive, fenced commit records under ``<url>/_fenced`` on any fsspec filesystem.

    It holds a filesystem client: ship ``url`` and ``storage_options`` to executors, not it.
    Records are cached once read (they never change): the ``cache_records`` most recently used
    (default ``CACHE_RECORDS``).

    Runs on
    -------
    driver (every method)
    """

    CACHE_RECORDS = 128
    _FETCH_WINDOW = 1000

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 cache_records: int | None = None) -> None:
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.fs, self.root = storage.url_to_fs(self.url, self.storage_options)
        self.root = self.root.rstrip("/")
        self.meta = f"{self.root}/{META_DIR}"
        self._cache: dict[int, CommitRecord] = {}
        self._cache_records = max(1, cache_records or self.CACHE_RECORDS)
        self._latest_version_hint: int | None = None

    # ---- paths -------------------------------------------------------------------------
    def _record_path(self, version: int) -> str:
        return f"{self.meta}/log/{version:0{_VERSION_DIGITS}d}.json"

    @property
    def _epoch_path(self) -> str:
        return f"{self.meta}/epoch.json"

    # ---- epochs ------------------------------------------------------------------------
    def _read_complete(self, path: str, versioned: bool = False) -> tuple[bytes, str] | None:
        """Read a small JSON object, waiting out a concurrent local exclusive create.

        Defensive: local creates and swaps publish whole files (link / rename) and S3 PUTs are
        atomic, but a local object written by other tools could still be caught half-written.
        Retried for at most ~2 s, then the content is returned as is (and fails to parse loudly).
        """
        for _attempt in range(100):
            if versioned:
                found = storage.read_versioned(self.fs, path)
            else:
                try:
                    found = (storage.read_object(self.fs, path), "")
                except FileNotFoundError:
                    found = None
            if found is None or not storage.is_local(self.fs) or _is_json(found[0]):
                return found
            time.sleep(0.02)
        return found

    def current_epoch(self) -> Epoch | None:
        """The latest claimed epoch, or None before any claim."""
        found = self._read_complete(self._epoch_path, versioned=True)
        return None if found is None else Epoch.from_json(found[0], self._epoch_path)

    def claim_epoch(self, writer_id: str, attempts: int = 50) -> Epoch:
        """Claim the next epoch by compare-and-swap; every older epoch is fenced from now on.

        Call once per query run (a restarted query claims again).

        Parameters
        ----------
        writer_id
            The claiming writer's name, kept in the epoch and named in ``FencedError``.
        attempts
            How many compare-and-swap rounds to try against concurrent claims.

        Returns
        -------
        Epoch
            The claimed epoch (its number, ``writer_id`` and a fresh token).

        Raises
        ------
        CommitConflictError
            Every attempt lost to a concurrent claim.
        CorruptLogError
            The epoch file cannot be read.
        """
        for _ in range(attempts):
            found = self._read_complete(self._epoch_path, versioned=True)
            number = (1 if found is None
                      else Epoch.from_json(found[0], self._epoch_path).number + 1)
            epoch = Epoch(number, writer_id, uuid.uuid4().hex)
            body = epoch.to_json().encode()
            if (storage.create_exclusive(self.fs, self._epoch_path, body) if found is None
                    else storage.replace_if_unchanged(self.fs, self._epoch_path, body,
                                                          found[1])):
                return epoch
        raise CommitConflictError(f"could not claim a writer epoch at {self._epoch_path} "
                                  f"after {attempts} attempts: too many concurrent claims")

    def check_epoch(self, epoch: Epoch) -> None:
        """Check that ``epoch`` is still the current one (same number and token).

        Parameters
        ----------
        epoch
            The epoch this writer claimed.

        Raises
        ------
        FencedError
            A newer epoch was claimed: another run owns the output.
        """
        current = self.current_epoch()
        if current is not None and (current.number, current.token) != (epoch.number,
                                                                        epoch.token):
            raise FencedError(
                f"writer {epoch.writer_id!r} (epoch {epoch.number}) is fenced at {self.url}: "
                f"epoch {current.number} was claimed by writer {current.writer_id!r}. A newer "
                "run owns this output; stop this query (or restart it to claim a new epoch).")

    # ---- reading -----------------------------------------------------------------------
    def read_version(self, version: int) -> CommitRecord | None:
        """The record of table version ``version`` (from 0), or None when it does not exist.

        Parameters
        ----------
        version
            The table version.

        Raises
        ------
        CorruptLogError
            The record cannot be parsed or holds another version.
        """
        if (cached := self._cache.pop(version, None)) is not None:
            self._cache[version] = cached  # the most recently used last
            return cached
        path = self._record_path(version)
        found = self._read_complete(path)
        if found is None:
            return None
        record = CommitRecord.from_json(found[0], path)
        if record.version != version:
            raise CorruptLogError(f"{path} holds the record of version {record.version}")
        self._remember(record)
        return record

    def _remember(self, record: CommitRecord) -> None:
        """Cache ``record``, dropping the least recently used beyond ``cache_records``."""
        cache = self._cache
        cache.pop(record.version, None)
        cache[record.version] = record
        while len(cache) > self._cache_records:
            del cache[next(iter(cache))]

    def latest_version(self) -> int | None:
        """Newest table version, or None for an empty log (one LIST, then cheap probes)."""
        if self._latest_version_hint is None:
            try:
                self.fs.invalidate_cache(f"{self.meta}/log")
                names = self.fs.ls(f"{self.meta}/log", detail=False)
            except FileNotFoundError:
                names = []
            versions = [int(n.rsplit("/", 1)[-1][:-5]) for n in names
                        if n.endswith(".json") and n.rsplit("/", 1)[-1][:-5].isdigit()]
            if not versions:
                return None
            self._latest_version_hint = max(versions)
        version = self._latest_version_hint
        while self.read_version(version + 1) is not None:
            version += 1
        self._latest_version_hint = version
        return version

    def records(self, start: int = 0, end: int | None = None) -> Iterator[CommitRecord]:
        """Iterate over the records of versions ``start`` to ``end`` (inclusive), in order.

        Parameters
        ----------
        start
            The first version.
        end
            The last version; None for the latest (an empty log yields nothing).

        Raises
        ------
        CorruptLogError
            A version in the range is missing, or a record is unreadable or misnamed.
        """
        last = self.latest_version() if end is None else end
        if last is None:
            return
        for low in range(start, last + 1, self._FETCH_WINDOW):
            high = min(low + self._FETCH_WINDOW, last + 1)
            fetched: dict[int, CommitRecord] = {}
            missing = [v for v in range(low, high) if v not in self._cache]
            if missing:  # fetch concurrently (s3fs batches these requests)
                paths = [self._record_path(v) for v in missing]
                for path, data in self.fs.cat(paths, on_error="omit").items():
                    if not _is_json(data):
                        continue  # being created right now: read_version waits for it
                    record = CommitRecord.from_json(data, path)
                    if path.rsplit("/", 1)[-1] != f"{record.version:0{_VERSION_DIGITS}d}.json":
                        raise CorruptLogError(f"{path} holds the record of version "
                                              f"{record.version}")
                    fetched[record.version] = record
                    self._remember(record)
            for version in range(low, high):
                found = fetched.get(version) or self.read_version(version)
                if found is None:
                    raise CorruptLogError(
                        f"commit log {self.meta}/log has a gap: version {version} is missing "
                        "(the log was edited by hand?)")
                yield found

    def get(self, batch_id: int) -> CommitRecord | None:
        """The commit record of streaming batch ``batch_id``, or None if it is not committed.

        Scans back from the newest version (batches commit in order: one or two reads).

        Parameters
        ----------
        batch_id
            The streaming batch id.

        Raises
        ------
        CorruptLogError
            A record read on the way cannot be parsed.
        """
        version = self.latest_version()
        while version is not None and version >= 0:
            record = self.read_version(version)
            if record is None:
                break
            if record.batch_id is not None:
                if record.batch_id == batch_id:
                    return record
                if record.batch_id < batch_id:
                    return None
            version -= 1
        return None

    def latest(self) -> int | None:
        """The newest committed batch id, or None before the first batch."""
        record = self.latest_batch_record()
        return None if record is None else record.batch_id

    def latest_batch_record(self) -> CommitRecord | None:
        """The newest committed batch's record (maintenance versions skipped), or None before the
        first batch; a record that cannot be parsed raises ``CorruptLogError``.
        """
        version = self.latest_version()
        while version is not None and version >= 0:
            record = self.read_version(version)
            if record is not None and record.batch_id is not None:
                return record
            version -= 1
        return None

    # ---- writing -----------------------------------------------------------------------
    def commit(self, batch_id: int, epoch: Epoch, files: Iterable[DataFile | Mapping[str, Any]],
               extra: Mapping[str, Any] | None = None, *, schema: str | None = None,
               ) -> CommitRecord:
        """Publish batch ``batch_id`` by creating its record exclusively at the next version.

        A retried call with the same epoch token returns the record it created (idempotent).

        Parameters
        ----------
        batch_id
            The streaming batch id; ids must grow.
        epoch
            The writer's claimed epoch, checked before the write.
        files
            The data files the batch adds (``DataFile`` or their dicts).
        extra
            JSON kept verbatim in the record (e.g. state manifests).
        schema
            The table's schema string; None keeps the previous version's.

        Returns
        -------
        CommitRecord
            The published (or already published) record.

        Raises
        ------
        FencedError
            A newer epoch exists or committed a version.
        CommitConflictError
            Another writer committed this batch, or a later batch is already committed.
        TypeError
            ``extra`` is not JSON-serialisable.
        """
        data_files = tuple(f if isinstance(f, DataFile) else DataFile.from_dict(dict(f))
                           for f in files)
        json.dumps(dict(extra or {}))  # fail early on non-JSON extra
        return self._append(batch_id, epoch.number, epoch.writer_id, epoch.token, data_files,
                            (), schema, dict(extra or {}), fence=epoch)

    def commit_change(self, base_version: int, files: Iterable[DataFile], removes: Iterable[str],
                      extra: Mapping[str, Any] | None = None, writer_id: str = "maintenance",
                      only_at: Callable[[int], bool] | None = None) -> CommitRecord:
        """Publish a maintenance change (e.g. compaction): add ``files``, retire ``removes``.

        It needs no epoch (it never changes which rows are visible) and commutes with appends.

        Parameters
        ----------
        base_version
            The version the change was prepared against.
        files
            The data files the change adds.
        removes
            The paths of the files it retires.
        extra
            JSON kept verbatim in the record.
        writer_id
            The name kept in the record.
        only_at
            If given, publish only at a version ``v`` where ``only_at(v)``, filling the versions
            before it with empty maintenance records (to land on ``_spark_metadata`` compaction
            points).

        Returns
        -------
        CommitRecord
            The published record.

        Raises
        ------
        CommitConflictError
            A version after ``base_version`` already retired one of ``removes``.
        """
        removes = tuple(removes)
        for record in self.records(base_version + 1):
            if set(record.removes) & set(removes):
                raise CommitConflictError(f"files of {self.url} were changed by version "
                                          f"{record.version} while this change was prepared")
        return self._append(None, None, writer_id, uuid.uuid4().hex, tuple(files), removes,
                            None, dict(extra or {}), fence=None, no_overlap=removes,
                            only_at=only_at)

    def _append(self, batch_id: int | None, epoch_number: int | None, writer_id: str,
                token: str, files: tuple[DataFile, ...], removes: tuple[str, ...],
                schema: str | None, extra: dict[str, Any], fence: Epoch | None,
                no_overlap: tuple[str, ...] = (),
                only_at: Callable[[int], bool] | None = None) -> CommitRecord:
        if fence is not None:
            self.check_epoch(fence)
        while True:
            latest = self.latest_version()
            previous = None if latest is None else self.read_version(latest)
            if batch_id is not None:
                existing = self.get(batch_id)
                if existing is not None:
                    return self._same_or_conflict(existing, batch_id, token)
                last_batch = self.latest()
                if last_batch is not None and last_batch > batch_id:
                    raise CommitConflictError(
                        f"cannot commit batch {batch_id} to {self.url}: batch {last_batch} is "
                        "already committed (batch ids must grow; a query with a fresh "
                        "checkpoint needs a fresh table path)")
            if fence is not None and previous is not None and previous.epoch > fence.number:
                raise FencedError(
                    f"writer {fence.writer_id!r} (epoch {fence.number}) is fenced at "
                    f"{self.url}: version {previous.version} was committed by epoch "
                    f"{previous.epoch} (writer {previous.writer_id!r})")
            version = 0 if latest is None else latest + 1
            if only_at is not None and not only_at(version):
                filler = CommitRecord(
                    version=version, batch_id=None, epoch=previous.epoch if previous else 0,
                    writer_id=writer_id, token=uuid.uuid4().hex,
                    schema=previous.schema if previous else None,
                    extra={"filler": True}, created_at=time.time())
                if storage.create_exclusive(self.fs, self._record_path(version),
                                                filler.to_json()):
                    self._remember(filler)
                continue
            record = CommitRecord(
                version=version, batch_id=batch_id,
                epoch=epoch_number if epoch_number is not None else (
                    previous.epoch if previous else 0),
                writer_id=writer_id, token=token, files=files, removes=removes,
                schema=schema if schema is not None else (previous.schema if previous else None),
                extra=extra, created_at=time.time())
            if storage.create_exclusive(self.fs, self._record_path(version),
                                            record.to_json()):
                self._remember(record)
                self._latest_version_hint = version
                return record
            # Lost the race for this version: learn what won, then decide.
            self._cache.pop(version, None)
            winner = self.read_version(version)
            if winner is None:
                continue
            if set(winner.removes) & set(no_overlap):
                raise CommitConflictError(f"files of {self.url} were changed by version "
                                          f"{winner.version} while this change was prepared")
            if batch_id is not None and winner.batch_id == batch_id:
                return self._same_or_conflict(winner, batch_id, token)

    def _same_or_conflict(self, existing: CommitRecord, batch_id: int,
                          token: str) -> CommitRecord:
        if existing.token == token:
            return existing
        raise CommitConflictError(
            f"batch {batch_id} of {self.url} was already committed by writer "
            f"{existing.writer_id!r} (epoch {existing.epoch}, version {existing.version})")


__all__ = ["FORMAT_VERSION", "META_DIR", "CommitLog", "CommitRecord", "Epoch"]
