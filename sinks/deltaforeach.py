"""``DeltaBatchWriter``: exactly-once Delta Lake output from ``foreachBatch``.

Usage::

    sink = DeltaBatchWriter("s3://lake/events", storage_options=opts, partition_by=["day"],
                            writer_id="events-query")
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()

Per batch, through ``orderedstream.sinks.deltacommit`` (its docstring has the design): the
driver checks the batch is new (a replay is skipped only when its Kafka offset ranges equal
the committed ones; otherwise ``CommitConflictError``) and the schema; executors write
Parquet files with Delta statistics through ``mapInArrow`` (unique names, bounded memory) and
return their descriptors plus the offset ranges of the rows they wrote (when the frame has
Kafka's ``topic`` / ``partition`` / ``offset`` columns); the driver makes ONE Delta commit with
the add actions and the application transaction ``(writer_id, batch_id)``.

``writer_id`` is the stream's stable name (Delta's ``txnAppId``): keep it across restarts;
give a query with a new checkpoint a new one. Without Kafka offset columns in the frame the
replay rule cannot compare offsets (both sides are empty): it compares the streaming query
ids instead (recorded in each commit; stable across restarts from one checkpoint), so a
second checkpoint's batch is refused, not skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from orderedstream.core.commitlog import CommitRecord
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CommitConflictError, CorruptLogError
from orderedstream.core.lazys3 import url_to_fs
from orderedstream.core.sparkmode import is_connect
from orderedstream.core.storage import options_for, read_object
from orderedstream.core.worker_errors import reason_first_in_callback
from orderedstream.sinks.deltacommit import (
    DEFAULT_CHECKPOINT_INTERVAL,
    DeltaCommitter,
    arrow_offsets,
    frame_offsets,
    merge_offsets,
)
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import spark_to_arrow
from orderedstream.sinks.writer import task_attempt_id, write_parquet_files

RESULT_SCHEMA = "files string, offsets string"


def delta_write_task(options: FencedParquetOptions,
                     ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function (pickled to executors): write this task's rows as Delta data
    files, yield one row with the JSON list of files and the offset ranges written.

    Parameters
    ----------
    options
        The writer's options (``file_stats`` set: files carry Delta statistics).

    Returns
    -------
    callable
        Arrow batches -> one batch of ``RESULT_SCHEMA``: ``files`` (JSON list of
        ``DataFile.to_dict()``) and ``offsets`` (JSON ``topic/partition -> [first, end)``).

    Runs on
    -------
    driver (built), executor (run)"""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        seen: list[dict[str, list[int]]] = []

        def tap(source: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in source:
                found = arrow_offsets(batch)
                if found:
                    seen.append(found)
                yield batch

        files = write_parquet_files(tap(batches), options, task_attempt_id())
        yield pa.RecordBatch.from_pydict({
            "files": [json.dumps([f.to_dict() for f in files])],
            "offsets": [json.dumps(merge_offsets(seen))]})

    return run


class DeltaBatchWriter:
    """The ``foreachBatch`` callable writing a Delta table (driver side; only the picklable
    options travel to executors). Options as ``FencedParquetBatchWriter``'s (``partition_by``,
    ``compression``, ``target_file_bytes``, ...); ``checkpoint_interval``: a Delta log
    checkpoint every N versions (default 10); ``checkpoint_location``: the query's checkpoint,
    where a Spark Connect session (no local properties) reads the streaming query id that
    tells a replay from another query's batch (a classic session needs it not)."""

    def __init__(self, path: str | None = None, *, options: Mapping[str, Any] | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 writer_id: str | None = None,
                 partition_by: Sequence[str] | str | None = None,
                 compression: str | None = None, compression_level: int | None = None,
                 row_group_rows: int | None = None, target_file_bytes: int | str | None = None,
                 max_open_files: int | None = None,
                 checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
                 checkpoint_location: str | None = None) -> None:
        explicit = {"path": path, "storage_options": storage_options, "writer_id": writer_id,
                    "partition_by": partition_by, "compression": compression,
                    "compression_level": compression_level, "row_group_rows": row_group_rows,
                    "target_file_bytes": target_file_bytes, "max_open_files": max_open_files}
        parsed = FencedParquetOptions.from_mapping(
            {**dict(options or {}), **{k: v for k, v in explicit.items() if v is not None}})
        self.options = replace(parsed, file_stats=True)
        self.committer = DeltaCommitter(self.options, app_id=self.options.writer_id,
                                        checkpoint_interval=checkpoint_interval)
        self.log = self.committer.log
        self.last_record: CommitRecord | None = None
        self.skipped: list[int] = []
        self.checkpoint_location = checkpoint_location

    @reason_first_in_callback  # the pack's sentence right after Spark's prefix
    def __call__(self, batch_df: Any, batch_id: int) -> None:
        batch_id = int(batch_id)
        query_id = streaming_query_id(batch_df, checkpoint_location=self.checkpoint_location,
                                      storage_options=self.options.storage_options)
        replayed: dict[str, Any] = {}

        def replay_offsets() -> Any:
            replayed["offsets"] = frame_offsets(batch_df)
            return replayed["offsets"]

        prepared = self.committer.prepare(batch_id, spark_to_arrow(batch_df.schema),
                                          replay_offsets)
        if isinstance(prepared, CommitRecord):
            self._check_same_query(prepared, batch_id, query_id, replayed.get("offsets"))
            self.skipped.append(batch_id)  # replay of a committed batch: nothing to do
            self.last_record = prepared
            return
        rows = batch_df.mapInArrow(delta_write_task(self.options), RESULT_SCHEMA).collect()
        files = [DataFile.from_dict(d) for row in rows for d in json.loads(row["files"])]
        offsets = merge_offsets(json.loads(row["offsets"]) for row in rows)
        extra = self.extra(batch_df, batch_id)
        if query_id is not None:
            extra = {**extra, "query_id": query_id}
        self.last_record = self.committer.publish(prepared, files, offsets=offsets,
                                                  extra=extra)

    def _check_same_query(self, record: CommitRecord, batch_id: int, query_id: str | None,
                          offsets: Any) -> None:
        """A committed batch is skipped as a replay when its Kafka offsets equal the replay's;
        a frame without offset columns has none to compare, so the streaming query ids are
        (stable across restarts from one checkpoint, new with a new checkpoint)."""
        committed_by = (record.extra or {}).get("query_id")
        if offsets or query_id is None or committed_by in (None, query_id):
            return
        raise CommitConflictError(
            f"batch {batch_id} of {self.options.path} is already committed by writer "
            f"{self.options.writer_id!r} from streaming query {committed_by}, and this is query "
            f"{query_id} (another checkpoint). Refused, not skipped (skipping would lose this "
            "batch's rows): give each checkpoint its own writer_id, or resume the first one")

    def extra(self, batch_df: Any, batch_id: int) -> dict[str, Any]:
        """JSON stored in the Delta commit (``commitInfo.orderedstream.extra``); override to
        add more (``query_id`` is added to it).

        Parameters
        ----------
        batch_df
            The batch's DataFrame, as ``foreachBatch`` passed it.
        batch_id
            The batch id.

        Returns
        -------
        dict
            JSON-serializable values; here ``{"entry": "foreachBatch"}``.

        Runs on
        -------
        driver"""
        return {"entry": "foreachBatch"}


def streaming_query_id(batch_df: Any, *, checkpoint_location: str | None = None,
                       storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The id of the streaming query running this ``foreachBatch`` call (Spark's local
    property, kept in the checkpoint: the same across restarts), None outside one.

    Under Spark Connect tasks and callbacks see no local properties: the id is read from the
    query's checkpoint (``<checkpoint_location>/metadata``, Spark's ``{"id": ...}``) when
    ``checkpoint_location`` is given, else None.

    Parameters
    ----------
    batch_df
        The batch's DataFrame, as ``foreachBatch`` passed it.
    checkpoint_location
        The query's checkpoint location (read under Spark Connect only).
    storage_options
        The pack's storage options for ``checkpoint_location``.

    Returns
    -------
    str or None
        The query id, or None when it cannot be known.

    Raises
    ------
    CorruptLogError
        Under Spark Connect: the checkpoint's metadata is not Spark's JSON.

    Runs on
    -------
    driver"""
    if is_connect(batch_df.sparkSession):
        if checkpoint_location is None:
            return None
        return checkpoint_query_id(checkpoint_location, storage_options)
    try:
        value = batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    except Exception:  # noqa: BLE001 - Spark Connect and the like: no local properties
        return None
    return str(value) if value else None


def checkpoint_query_id(checkpoint_location: str,
                        storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The streaming query id Spark keeps in ``<checkpoint_location>/metadata``.

    Parameters
    ----------
    checkpoint_location
        The query's checkpoint: a local path, ``file:``, ``s3://`` / ``s3a://`` or another
        fsspec URL.
    storage_options
        The pack's storage options for it.

    Returns
    -------
    str or None
        The id, or None when the checkpoint has no metadata yet.

    Raises
    ------
    CorruptLogError
        The metadata's first line is not Spark's JSON with an ``"id"``.

    Runs on
    -------
    driver"""
    location = checkpoint_location
    if location.startswith(("s3a://", "s3n://")):
        location = "s3://" + location.split("://", 1)[1]
    elif location.startswith("file:") and "://" not in location:  # Hadoop's file:/path
        location = location[len("file:"):]
    fs, root = url_to_fs(location, options_for(location, storage_options))
    try:
        text = read_object(fs, f"{root.rstrip('/')}/metadata").decode()
    except FileNotFoundError:
        return None
    try:
        return str(json.loads(text.splitlines()[0])["id"])
    except (ValueError, KeyError, IndexError) as exc:
        raise CorruptLogError(f"{checkpoint_location}/metadata is not a Spark streaming "
                              f"checkpoint's metadata (a JSON line with an \"id\"): {exc}") from exc



__all__ = ["DeltaBatchWriter", "checkpoint_query_id", "delta_write_task", "streaming_query_id"]
