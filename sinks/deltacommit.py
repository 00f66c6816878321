"""One Delta commit per batch: the publish path of Delta output.

Batch N of a stream is ONE Delta commit (each log entry created exclusively): the add actions
of the files the executors wrote, the application transaction ``(writer_id, N)`` (the
stream's stable name) and ``commitInfo["orderedstream"]``: token, Kafka offset ranges, schema
and ``extra`` (the ordered stage's state manifests: output and state published by one
create). ``DeltaCommitter.committed``, ``check_schema`` and ``publish`` state the rules. All
of it runs on the driver but ``arrow_offsets`` and ``merge_offsets`` (executors too).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from orderedstream.core.commitlog import CommitRecord
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CommitConflictError, SchemaMismatchError
from orderedstream.core.storage import private_options
from orderedstream.sinks.deltafiles import (
    add_action,
    delta_storage_options,
    null_counts_in_not_null_columns,
)
from orderedstream.sinks.deltalog import COMMIT_KEY, FORMAT, DeltaBatchLog, DeltaEntry
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import encode_schema, evolve

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 10
COMMIT_ATTEMPTS = 100
Offsets = dict[str, list[int]]


@dataclass(frozen=True, kw_only=True)
class DeltaPrepared:
    """A batch that is not committed yet: the table schema after it and this attempt's
    token (which tells this attempt's commit from another writer's)."""

    batch_id: int
    schema: pa.Schema
    token: str


def delta_normalized(schema: pa.Schema, where: str) -> pa.Schema:
    """``schema`` as a Delta table stores it (a round trip through Delta's types).

    Parameters
    ----------
    schema, where
        A batch's Arrow schema, and how the error names the table.

    Raises
    ------
    SchemaMismatchError
        A column type Delta cannot hold (unsigned integers, nanosecond timestamps, ...)."""
    from deltalake import Schema as DeltaSchema

    try:
        return pa.schema(DeltaSchema.from_arrow(schema).to_arrow())
    except Exception as exc:  # noqa: BLE001 - delta-rs raises several types here
        raise SchemaMismatchError(
            f"{where}: the schema {schema} has a type Delta Lake cannot store ({exc}); "
            "accepted: Spark SQL types (no unsigned integers, no nanosecond timestamps)"
        ) from None


class DeltaCommitter:
    """Commits batches of one writer (``app_id``) to the Delta table at ``options.path``;
    driver side (it holds a delta-rs table handle; executors get only ``options``)."""

    def __init__(self, options: FencedParquetOptions, *, app_id: str,
                 checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL) -> None:
        self.options = options
        self.app_id = app_id
        self.checkpoint_interval = int(checkpoint_interval)
        self.url = options.path.rstrip("/")
        self.delta_options = delta_storage_options(self.url, options.storage_options)
        self.log = self.new_log()
        self._table: Any = None
        self._prepared_at: int | None = None  # the batch whose prepare read the table last

    def new_log(self, *, private: bool = False, cache_entries: int | None = None) -> DeltaBatchLog:
        """A batch log of this table and writer with caches of its own (``log``: the committer's).

        Parameters
        ----------
        private
            Give it a filesystem of its own too (``storage.private_options``).
        cache_entries
            How many versions its cache keeps (None: ``DeltaBatchLog.CACHE_ENTRIES``)."""
        options = self.options.storage_options
        return DeltaBatchLog(self.url, private_options(options) if private else options,
                             writer_id=self.app_id, cache_entries=cache_entries)

    def table(self) -> Any:
        """The delta-rs ``DeltaTable`` at its latest version, or None before the first commit."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        if self._table is None:
            try:
                self._table = DeltaTable(self.url, storage_options=self.delta_options)
            except TableNotFoundError:
                return None
        else:
            self._table.update_incremental()
        return self._table

    @property
    def has_table(self) -> bool:
        """Whether the last look (``table``) found a table: False before the first commit."""
        return self._table is not None

    def table_schema(self) -> pa.Schema | None:
        """The table's Arrow schema at its latest version, or None before the first commit."""
        table = self.table()
        return None if table is None else pa.schema(table.schema().to_arrow())

    def committed(self, batch_id: int, replay_offsets: Callable[[], Offsets]
                  ) -> CommitRecord | None:
        """Rule 1, before any file is written: is this writer's batch ``batch_id`` committed?
        With the replay's offset ranges it is a replay (skip it); with others, another query
        (checkpoint) writes the table under this writer id: refused, a skip would lose rows.

        Parameters
        ----------
        batch_id
            The batch about to be written.
        replay_offsets
            Computes this run's offset ranges of the batch (only for a committed batch).

        Returns
        -------
        CommitRecord or None
            None for a new batch.

        Raises
        ------
        CommitConflictError
            Committed with other offset ranges, or below the latest committed batch id."""
        self.log.refresh()
        newest = self.log.latest_version()  # one look for new versions serves both reads
        entry = self.log.batch_entry(batch_id, upto=newest)
        found = self.log.latest_batch_entry(upto=newest)
        latest = None if found is None else found.record.batch_id
        if entry is None and (latest is None or latest < batch_id):
            return None
        if entry is None:
            raise CommitConflictError(
                f"batch {batch_id} arrived but batch {latest} of writer {self.app_id!r} is "
                f"already committed at {self.url}: batch ids must grow. A query with a fresh "
                "checkpoint needs its own writer id (or a fresh table)")
        mine = replay_offsets()
        if entry.offsets == mine:
            log.info("batch %s of %s is already committed (Delta version %s, same offsets); "
                     "replay skipped", batch_id, self.url, entry.record.version)
            return entry.record
        raise CommitConflictError(
            f"batch {batch_id} of {self.url} is already committed by writer {self.app_id!r} "
            f"(Delta version {entry.record.version}) with Kafka offsets "
            f"{_ranges(entry.offsets)}, but this run's batch {batch_id} covers "
            f"{_ranges(mine)}: another query (another checkpoint) writes this table under "
            "the same writer id. Refused, not skipped (skipping would lose this batch's "
            "records): give each checkpoint its own writer id, or resume the first checkpoint")

    def check_schema(self, batch_schema: pa.Schema) -> pa.Schema:
        """The table schema after this batch (the first one sets it and the partition
        columns); new nullable columns are added to the table now (a metadata-only commit).

        Parameters
        ----------
        batch_schema
            The batch's Arrow schema.

        Returns
        -------
        pyarrow.Schema

        Raises
        ------
        SchemaMismatchError
            Any other change (types, partition columns, a missing or non-nullable column).
        CommitConflictError
            Adding columns lost to too many concurrent commits."""
        where = f"Delta table {self.url}"
        batch = delta_normalized(batch_schema, where)
        table = self.table()
        if table is None:
            return evolve(None, batch, where, self.options.partition_by)
        existing = tuple(table.metadata().partition_columns)
        if existing != tuple(self.options.partition_by):
            raise SchemaMismatchError(
                f"{where} is partitioned by {list(existing)}, this writer by "
                f"{list(self.options.partition_by)}: partition columns cannot change")
        current = pa.schema(table.schema().to_arrow())
        after = evolve(current, batch, where, self.options.partition_by)
        added = [f for f in after if f.name not in current.names]
        if added:
            self._add_columns(table, added)
        return after

    def _add_columns(self, table: Any, added: list[pa.Field]) -> None:
        from deltalake import Schema as DeltaSchema
        from deltalake.exceptions import CommitFailedError

        fields = list(DeltaSchema.from_arrow(pa.schema(added)).fields)
        for _ in range(COMMIT_ATTEMPTS):
            try:
                table.alter.add_columns(fields)
                log.info("Delta table %s: added nullable columns %s", self.url,
                         [f.name for f in added])
                return
            except CommitFailedError:
                table.update_incremental()
                now = pa.schema(table.schema().to_arrow()).names
                if all(f.name in now for f in added):
                    return  # another writer added them
                time.sleep(0.05)
        raise CommitConflictError(f"could not add columns {[f.name for f in added]} to "
                                  f"{self.url}: too many concurrent commits")

    def prepare(self, batch_id: int, batch_schema: pa.Schema,
                replay_offsets: Callable[[], Offsets]) -> CommitRecord | DeltaPrepared:
        """Step 1: the committed record of a replayed batch (skip it), else the schema and
        token to publish it with; raises as ``committed`` and ``check_schema`` do.

        Parameters
        ----------
        batch_id, batch_schema
            The batch about to be written and its Arrow schema.
        replay_offsets
            Computes its Kafka offset ranges (see ``committed``).

        Returns
        -------
        CommitRecord or DeltaPrepared"""
        existing = self.committed(batch_id, replay_offsets)
        if existing is not None:
            return existing
        self._prepared_at = None
        schema = self.check_schema(batch_schema)
        self._prepared_at = batch_id
        return DeltaPrepared(batch_id=batch_id, schema=schema, token=uuid.uuid4().hex)

    def publish(self, prepared: DeltaPrepared, files: Iterable[DataFile], *,
                offsets: Offsets, extra: Mapping[str, Any] | None = None) -> CommitRecord:
        """Rule 2: make batch ``prepared.batch_id``'s ONE Delta commit (``files``, the
        application transaction, ``offsets``, ``extra``). delta-rs's rebasing is off: a commit
        losing a version's race fails, the log is re-read, and this batch found there with
        another token is refused; another winner (compaction) means a retry at the next one.

        Parameters
        ----------
        prepared
            What ``prepare`` returned.
        files, offsets
            The data files the executors wrote, and the batch's Kafka offset ranges.
        extra
            JSON stored verbatim in the commit.

        Returns
        -------
        CommitRecord

        Raises
        ------
        CommitConflictError
            Another attempt committed this batch or a later one first, or too many commits
            raced; nothing of this attempt is visible.
        SchemaMismatchError
            ``files`` hold nulls in NOT NULL columns; nothing is committed."""
        from deltalake import Schema as DeltaSchema
        from deltalake.exceptions import CommitFailedError, DeltaError
        from deltalake.transaction import (
            CommitProperties,
            Transaction,
            create_table_with_add_actions,
        )

        batch_id = prepared.batch_id
        files = list(files)
        nulls = null_counts_in_not_null_columns(files, prepared.schema)
        if nulls:
            raise SchemaMismatchError(
                f"batch {batch_id} of Delta table {self.url} has nulls in NOT NULL columns ("
                + ", ".join(f"{name}: {count}" for name, count in sorted(nulls.items()))
                + "); nothing was committed. Fill them, or write to a table whose columns "
                "are nullable")
        meta = {COMMIT_KEY: {
            "format": FORMAT, "writer_id": self.app_id, "batch_id": batch_id,
            "token": prepared.token, "offsets": {k: list(v) for k, v in sorted(offsets.items())},
            "schema": encode_schema(prepared.schema), "extra": dict(extra or {})}}
        props = CommitProperties(custom_metadata=meta, max_commit_retries=0,
                                 app_transactions=[Transaction(self.app_id, batch_id)])
        actions = [add_action(f) for f in files]
        for attempt in range(COMMIT_ATTEMPTS):
            # The first attempt reuses prepare's snapshot: a commit since then makes it fail.
            reuse = attempt == 0 and self._prepared_at == batch_id and self._table is not None
            table = self._table if reuse else self.table()
            self._prepared_at = None
            # Checked on the snapshot the commit is based on (version + 1 or fail, no rebase).
            done = None if table is None else table.transaction_version(self.app_id)
            if done is not None and done >= batch_id:
                decided = self._decided(batch_id, prepared.token, table.version())
                if decided is None:
                    raise CommitConflictError(
                        f"batch {batch_id} of {self.url}: the Delta log's application "
                        f"transaction of writer {self.app_id!r} is at {done}, but no commit "
                        "of this batch was found (was the log edited by another tool?)")
                return decided.record
            base = None if table is None else table.version()
            try:
                pause = False
                if table is None:
                    create_table_with_add_actions(
                        self.url, DeltaSchema.from_arrow(prepared.schema), actions,
                        mode="error", partition_by=list(self.options.partition_by) or None,
                        configuration={"delta.checkpointInterval": str(self.checkpoint_interval)},
                        storage_options=self.delta_options, commit_properties=props)
                else:
                    table.create_write_transaction(
                        actions, "append", table.schema(),
                        list(self.options.partition_by) or None, commit_properties=props)
            except CommitFailedError:
                pause = True  # lost the race for this version: re-read the log and decide
            except DeltaError as exc:
                if table is not None or "exist" not in str(exc).lower():
                    raise
                pause = True  # another writer created the table first: re-read and decide
            if pause:
                time.sleep(min(0.2, 0.005 * attempt))
            else:  # committed without rebase: at the snapshot's next version (0: created)
                own = self._own_commit(batch_id, prepared.token, 0 if base is None else base + 1)
                if own is not None:
                    return own.record
        raise CommitConflictError(f"could not commit batch {batch_id} to {self.url} after "
                                  f"{COMMIT_ATTEMPTS} attempts: too many concurrent commits")

    def _own_commit(self, batch_id: int, token: str, version: int) -> DeltaEntry | None:
        """This attempt's commit read back from Delta ``version`` (one GET, no listing), or
        None when that version is not it (the loop then re-reads the log and decides)."""
        entry = self.log.entry(version)
        if entry is None or entry.record.batch_id != batch_id or entry.record.token != token:
            return None
        return entry

    def _decided(self, batch_id: int, token: str, version: int) -> DeltaEntry | None:
        """This attempt's entry when its commit is in the log (up to Delta ``version``);
        None when batch ``batch_id`` is not there; CommitConflictError when another writer
        committed it (or a later batch) first."""
        self.log.refresh()
        for _ in range(500):  # a lagging listing: wait it out (500 short sleeps at most)
            if (self.log.latest_version() or 0) >= version:
                break
            time.sleep(0.01)
            self.log.refresh()
        entry = self.log.batch_entry(batch_id)
        if entry is not None:
            if entry.record.token == token:
                return entry
            raise CommitConflictError(
                f"batch {batch_id} of {self.url} was committed by another attempt of writer "
                f"{self.app_id!r} first (Delta version {entry.record.version}, offsets "
                f"{_ranges(entry.offsets)}): this attempt lost the race and is refused; "
                "nothing of it is visible")
        latest = self.log.latest()
        if latest is not None and latest > batch_id:
            raise CommitConflictError(
                f"cannot commit batch {batch_id} to {self.url}: batch {latest} of writer "
                f"{self.app_id!r} is already committed (batch ids must grow)")
        return None


def _ranges(offsets: Mapping[str, list[int]]) -> str:
    if not offsets:
        return "{} (no Kafka offsets)"
    return "{" + ", ".join(f"{k}: [{v[0]}, {v[1]})" for k, v in sorted(offsets.items())) + "}"


def frame_offsets(frame: Any) -> Offsets:
    """The Kafka offset ranges a batch DataFrame covers, ``topic/partition -> [first, end)``:
    the planned ranges of ``orderedkafka`` ``emit=ranges`` rows (``startOffset`` /
    ``endOffset``), else min and max + 1 of the ``offset`` column per topic-partition (one
    Spark aggregation); {} when the frame has no Kafka columns.

    Parameters
    ----------
    frame
        A batch's Spark DataFrame."""
    columns = set(frame.columns)
    if {"topic", "partition", "startOffset", "endOffset"} <= columns:
        rows = frame.select("topic", "partition", "startOffset", "endOffset").collect()
        return {f"{r['topic']}/{int(r['partition'])}": [int(r["startOffset"]),
                                                        int(r["endOffset"])] for r in rows}
    if not {"topic", "partition", "offset"} <= columns:
        return {}
    from pyspark.sql import functions as F  # noqa: N812

    rows = (frame.groupBy("topic", "partition")
            .agg(F.min("offset").alias("first"), F.max("offset").alias("last")).collect())
    return {f"{r['topic']}/{int(r['partition'])}": [int(r["first"]), int(r["last"]) + 1]
            for r in rows if r["first"] is not None}


def merge_offsets(found: Iterable[Mapping[str, list[int]]]) -> Offsets:
    """Offset ranges from several tasks merged per topic-partition (min first, max end).

    Parameters
    ----------
    found
        ``topic/partition -> [first, end)`` mappings."""
    out: Offsets = {}
    for ranges in found:
        for key, (first, end) in ranges.items():
            have = out.get(key)
            out[key] = [first, end] if have is None else [min(have[0], first), max(have[1], end)]
    return out


def arrow_offsets(batch: pa.RecordBatch) -> Offsets:
    """Offset ranges of one Arrow batch with ``topic`` / ``partition`` / ``offset`` columns
    ({} without them): used by executors while they write, so it costs no extra pass.

    Parameters
    ----------
    batch
        Rows about to be written."""
    if not {"topic", "partition", "offset"} <= set(batch.schema.names) or batch.num_rows == 0:
        return {}
    grouped = (pa.Table.from_batches([batch]).select(["topic", "partition", "offset"])
               .group_by(["topic", "partition"], use_threads=False)
               .aggregate([("offset", "min"), ("offset", "max")]))
    return {f"{t}/{int(p)}": [int(lo), int(hi) + 1]
            for t, p, lo, hi in zip(grouped["topic"].to_pylist(),
                                    grouped["partition"].to_pylist(),
                                    grouped["offset_min"].to_pylist(),
                                    grouped["offset_max"].to_pylist(), strict=True)
            if lo is not None}


__all__ = ["DEFAULT_CHECKPOINT_INTERVAL", "DeltaCommitter", "DeltaPrepared", "Offsets",
           "arrow_offsets", "delta_normalized", "frame_offsets", "merge_offsets"]
