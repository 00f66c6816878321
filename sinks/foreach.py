"""``FencedParquetBatchWriter``: exactly-once Parquet output from ``foreachBatch``.

Usage::

    sink = FencedParquetBatchWriter("s3://lake/events", storage_options=opts,
                                    partition_by=["day"], writer_id="events-query")
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()

Per batch (driver): skip it if this writer's commit record exists (a replay; another writer's
record is a CommitConflictError); claim the epoch at the first batch written, check it and the
schema; executors write Parquet files through ``mapInArrow`` (unique names, bounded
memory) and return their descriptors; the driver creates the batch's commit record
exclusively, then derives ``_spark_metadata``. The epoch is claimed at the first batch this
run writes, so an older run still writing to the same path is fenced from then on.
``writer_id`` names the query (like Delta's txnAppId): replays are recognised by it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from orderedstream.core.commitlog import CommitLog, CommitRecord, Epoch
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CommitConflictError
from orderedstream.sinks.commit import check_schema, publish_batch, sync_spark
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import spark_to_arrow
from orderedstream.sinks.writer import task_attempt_id, write_parquet_files

FILES_SCHEMA = "files string"


def _write_task(options: FencedParquetOptions):  # type: ignore[no-untyped-def]
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
                 **kwargs: Any) -> None:
        merged = dict(options or {})
        if path is not None:
            merged["path"] = path
        self.options = FencedParquetOptions.from_mapping(merged, **kwargs)
        self.log = CommitLog(self.options.path, self.options.storage_options)
        self.epoch: Epoch | None = None
        self.last_record: CommitRecord | None = None
        self.skipped: list[int] = []

    def claim(self) -> Epoch:
        """Claim the writer epoch now (otherwise done at the first batch)."""
        self.epoch = self.log.claim_epoch(self.options.writer_id)
        return self.epoch

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        existing = self.log.get(batch_id)
        if existing is not None:
            if existing.writer_id != self.options.writer_id:
                raise CommitConflictError(
                    f"batch {batch_id} of {self.options.path} was already committed by writer "
                    f"{existing.writer_id!r}, not {self.options.writer_id!r}: another query "
                    "writes this path (a query with a fresh checkpoint needs a fresh path)")
            self.skipped.append(batch_id)  # replay of a committed batch: nothing to do
            sync_spark(self.log, self.options)
            return
        epoch = self.epoch or self.claim()
        self.log.check_epoch(epoch)
        schema = check_schema(self.log, self.options, spark_to_arrow(batch_df.schema))
        rows = batch_df.mapInArrow(_write_task(self.options), FILES_SCHEMA).collect()
        files = [DataFile.from_dict(d) for row in rows for d in json.loads(row["files"])]
        self.last_record = publish_batch(self.log, self.options, batch_id, epoch, files,
                                         schema, extra=self.extra(batch_df, batch_id))

    def extra(self, batch_df: Any, batch_id: int) -> dict[str, Any]:
        """JSON stored in the commit record; override to add more."""
        return {"entry": "foreachBatch"}
