"""``FencedParquetBatchWriter``: exactly-once Parquet output from ``foreachBatch``.

Usage::

    sink = FencedParquetBatchWriter("s3://lake/events", storage_options=opts,
                                    partition_by=["day"], writer_id="events-query")
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()

Per batch (driver), through the shared publish path (``orderedstream.sinks.commit``):
``prepare_batch`` skips it if this writer's commit record exists (a replay; another writer's
record is a CommitConflictError), claims the epoch at the first batch written, checks it and
the schema; executors write Parquet files through ``mapInArrow`` (unique names, bounded
memory) and return their descriptors; ``publish_batch`` creates the batch's commit record
exclusively, then derives ``_spark_metadata``. The epoch is claimed at the first batch this
run writes, so an older run still writing to the same path is fenced from then on.
``writer_id`` names the query (like Delta's txnAppId): replays are recognised by it.

Options are keyword arguments (a misspelt one is a TypeError) or, Spark style, an
``options={"partitionBy": "day", ...}`` mapping; see ``FencedParquetOptions``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from orderedstream.core.commitlog import CommitLog, CommitRecord, Epoch
from orderedstream.core.datafile import DataFile
from orderedstream.core.worker_errors import reason_first_in_callback
from orderedstream.sinks.commit import prepare_batch, publish_batch
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import spark_to_arrow
from orderedstream.sinks.writer import task_attempt_id, write_parquet_files

FILES_SCHEMA = "files string"


def _write_task(options: FencedParquetOptions,
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function (pickled to executors): write this task's rows, yield one row
    holding the JSON list of written files."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files = write_parquet_files(batches, options, task_attempt_id())
        text = json.dumps([f.to_dict() for f in files])
        yield pa.RecordBatch.from_pydict({"files": [text]})

    return run


class FencedParquetBatchWriter:
    """The ``foreachBatch`` callable. One instance per query run (it holds the epoch).

    Lives in the driver's Python process; only ``FencedParquetOptions`` travels to executors.
    """

    def __init__(self, path: str | None = None, *, options: Mapping[str, Any] | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 writer_id: str | None = None,
                 partition_by: Sequence[str] | str | None = None,
                 compression: str | None = None, compression_level: int | None = None,
                 row_group_rows: int | None = None, target_file_bytes: int | str | None = None,
                 max_open_files: int | None = None,
                 metadata_compact_interval: int | None = None) -> None:
        explicit = {"path": path, "storage_options": storage_options, "writer_id": writer_id,
                    "partition_by": partition_by, "compression": compression,
                    "compression_level": compression_level, "row_group_rows": row_group_rows,
                    "target_file_bytes": target_file_bytes, "max_open_files": max_open_files,
                    "metadata_compact_interval": metadata_compact_interval}
        self.options = FencedParquetOptions.from_mapping(
            {**dict(options or {}), **{k: v for k, v in explicit.items() if v is not None}})
        self.log = CommitLog(self.options.path, self.options.storage_options)
        self.epoch: Epoch | None = None
        self.last_record: CommitRecord | None = None
        self.skipped: list[int] = []

    def claim(self) -> Epoch:
        """Claim the writer epoch now (otherwise done at the first batch)."""
        self.epoch = self.log.claim_epoch(self.options.writer_id)
        return self.epoch

    @reason_first_in_callback  # the pack's sentence right after Spark's prefix
    def __call__(self, batch_df: Any, batch_id: int) -> None:
        prepared = prepare_batch(self.log, self.options, batch_id,
                                 spark_to_arrow(batch_df.schema), epoch=self.epoch,
                                 writer_id=self.options.writer_id, owner=self.options.writer_id)
        if isinstance(prepared, CommitRecord):
            self.skipped.append(batch_id)  # replay of a committed batch: nothing to do
            return
        self.epoch = prepared.epoch
        rows = batch_df.mapInArrow(_write_task(self.options), FILES_SCHEMA).collect()
        files = [DataFile.from_dict(d) for row in rows for d in json.loads(row["files"])]
        self.last_record = publish_batch(self.log, self.options, batch_id, prepared.epoch,
                                         files, prepared.schema,
                                         extra=self.extra(batch_df, batch_id))

    def extra(self, batch_df: Any, batch_id: int) -> dict[str, Any]:
        """JSON stored in the commit record (``extra``); override to add more.

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
