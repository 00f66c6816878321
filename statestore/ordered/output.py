"""The rows one batch committed, as a Spark DataFrame, to forward to another sink.

``BatchResult.output_df()`` / ``OrderedStateful.batch_output(batch_id)`` read exactly the
Parquet files batch N's commit record lists (nothing else: not other batches, not orphans of
failed attempts), so inside ``foreachBatch`` the rows can go on to Delta, JDBC, Kafka, ...::

    def each_batch(df, batch_id):
        result = processor.process_batch(df, batch_id)
        out = result.output_df()               # the same rows on a replay of batch_id
        out.withColumn("batch_id", F.lit(batch_id)).write.format("delta")...

Idempotency: the fenced table commits batch N once, but a downstream write is a separate
system. If the query dies after N's record is created and before the downstream write ends,
Spark replays N: ``process_batch`` skips it (``result.skipped``) and ``output_df`` returns the
same rows again, so the downstream sink must tolerate the repeat: dedupe or overwrite by
batch id (Delta's ``txnAppId``/``txnVersion``, a JDBC upsert keyed by batch id, Kafka's
idempotent producer with the batch id in the key, ...).

Two engines, same rows:

- ``"arrow"`` (default): one Spark task per file reads it with pyarrow through fsspec and the
  processor's ``storage_options`` (``s3://`` works without hadoop-aws JARs or s3a settings),
  in bounded Arrow batches; Hive partition columns come back typed from the table schema.
- ``"spark"``: Spark's own Parquet reader on the files' Hadoop URIs (``s3://`` becomes
  ``s3a://`` as in ``FencedTable.spark_uri``); needs hadoop-aws and ``fs.s3a.*`` settings on
  the session for S3 (``orderedstream.dev.services.spark.s3a_conf``), gives column pruning.

Files a later compaction retired stay readable until ``vacuum`` removes them (after its grace
period); past that, batch N's own rows no longer exist separately and the call says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import pyarrow as pa

from orderedstream.core.commitlog import CommitLog, CommitRecord
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CorruptLogError, OptionError, TableIntegrityError
from orderedstream.core.sparkmode import text_frame
from orderedstream.core.storage import url_to_fs
from orderedstream.sinks.schema import decode_schema, spark_to_arrow
from orderedstream.sinks.table import FencedTable

ENGINES = ("arrow", "spark")
READ_BATCH_ROWS = 8_192


def spark_schema_of(schema: pa.Schema) -> Any:
    """The Spark StructType of a committed Arrow schema (clear error for types Spark lacks)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(schema)
    except (TypeError, ValueError) as exc:
        raise OptionError(f"the output schema {schema} has a type Spark cannot represent "
                          f"({exc}); declare output_schema with Spark types") from exc


class CommittedFileReader:
    """``mapInArrow`` function (executors): rows of ``file`` descriptors -> the files' rows.

    Picklable: holds the table URL, storage options, the committed schema (IPC bytes) and the
    Arrow schema Spark expects; each file is read in batches of ``batch_rows``.
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any], schema: pa.Schema,
                 target: pa.Schema, batch_rows: int = READ_BATCH_ROWS) -> None:
        self.url = url
        self.storage_options = dict(storage_options)
        self.schema_ipc = schema.serialize().to_pybytes()
        self.target_ipc = target.serialize().to_pybytes()
        self.batch_rows = batch_rows

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.dataset as ds

        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        target = pa.ipc.read_schema(pa.py_buffer(self.target_ipc))
        fs, root = url_to_fs(self.url, self.storage_options)
        root = root.rstrip("/")
        for batch in batches:
            for text in batch.column("file").to_pylist():
                file = DataFile.from_json(text)
                parts = tuple(file.partition)
                partitioning = (ds.partitioning(pa.schema([schema.field(c) for c in parts]),
                                                flavor="hive") if parts else None)
                dataset = ds.dataset([f"{root}/{file.path}"], schema=schema, format="parquet",
                                     filesystem=fs, partitioning=partitioning,
                                     partition_base_dir=root)
                for chunk in dataset.to_batches(batch_size=self.batch_rows):
                    if chunk.num_rows:
                        yield chunk.select(target.names).cast(target)


def retired_and_gone(log: CommitLog, record: CommitRecord) -> list[str]:
    """Files of ``record`` that a later compaction retired and vacuum already deleted."""
    mine = {f.path for f in record.files}
    retired = {p for later in log.records(record.version + 1) for p in later.removes} & mine
    return sorted(p for p in retired if not log.fs.exists(f"{log.root}/{p}"))


def batch_output_df(spark: Any, log: CommitLog, record: CommitRecord,
                    storage_options: Mapping[str, Any],
                    engine: Literal["arrow", "spark"] = "arrow") -> Any:
    """A DataFrame of exactly the rows ``record`` (a batch's commit record) made visible."""
    if engine not in ENGINES:
        raise OptionError(f"output_df(engine={engine!r}): accepted are "
                          f"{', '.join(repr(e) for e in ENGINES)}")
    if record.schema is None:
        raise CorruptLogError(f"commit record {record.version} of {log.url} has no schema")
    schema = decode_schema(record.schema)
    spark_schema = spark_schema_of(schema)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise OptionError("output_df() needs a SparkSession: pass spark= (inside "
                              "foreachBatch: batch_df.sparkSession)")
    gone = retired_and_gone(log, record)
    if gone:
        raise TableIntegrityError(
            f"batch {record.batch_id}'s output files {gone[:3]}{'...' if len(gone) > 3 else ''}"
            f" at {log.url} were compacted into larger files and vacuumed: the batch's own "
            "rows no longer exist separately. Read the table instead (FencedTable.to_arrow)")
    if not record.files:
        return spark.createDataFrame([], spark_schema)
    if engine == "spark":
        table = FencedTable(log.url, log=log)
        base = table.spark_uri("").rstrip("/")
        uris = [table.spark_uri(f.path) for f in record.files]
        return (spark.read.schema(spark_schema).option("basePath", base).parquet(*uris)
                .select(*schema.names))
    reader = CommittedFileReader(log.url, storage_options, schema, spark_to_arrow(spark_schema))
    descriptors = [f.to_json() for f in record.files]
    return text_frame(spark, descriptors, column="file").mapInArrow(reader, spark_schema)


__all__ = ["ENGINES", "CommittedFileReader", "batch_output_df", "retired_and_gone",
           "spark_schema_of"]

