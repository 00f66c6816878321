"""The rows one batch committed, as a Spark DataFrame, to forward to another sink.

Exactly the Parquet files batch N's commit record lists (not other batches, not orphans of
failed attempts). A replay of N returns the same rows again, so the downstream sink must
dedupe or overwrite by batch id (Delta's ``txnAppId``/``txnVersion``, an upsert keyed by it).
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
    """The Spark schema of a committed Arrow schema.

    Parameters
    ----------
    schema
        The Arrow schema a commit record carries.

    Returns
    -------
    pyspark.sql.types.StructType
        The same columns in Spark types.

    Raises
    ------
    OptionError
        A column has a type Spark cannot represent (declare ``output_schema`` with Spark
        types).

    Runs on
    -------
    driver"""
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
    """Files of ``record`` that a later compaction retired and vacuum already deleted.

    Parameters
    ----------
    log
        The fenced table's commit log.
    record
        The batch's commit record.

    Returns
    -------
    list[str]
        Their table-relative paths, sorted; empty when every file is still readable.

    Runs on
    -------
    driver"""
    mine = {f.path for f in record.files}
    retired = {p for later in log.records(record.version + 1) for p in later.removes} & mine
    return sorted(p for p in retired if not log.fs.exists(f"{log.root}/{p}"))


def batch_output_df(spark: Any, log: CommitLog, record: CommitRecord,
                    storage_options: Mapping[str, Any],
                    engine: Literal["arrow", "spark"] = "arrow") -> Any:
    """A DataFrame of exactly the rows ``record`` (a batch's commit record) made visible.

    Files a later compaction retired stay readable until ``vacuum`` removes them; past that
    the batch's own rows no longer exist separately.

    Parameters
    ----------
    spark
        The Spark session, or ``None`` for the active one.
    log
        The fenced table's commit log.
    record
        The batch's commit record.
    storage_options
        fsspec options to read the table's files with (``"arrow"`` engine).
    engine
        ``"arrow"``: one Spark task per file reads it with pyarrow through fsspec
        (``s3://`` without hadoop-aws), Hive partition columns typed from the table schema.
        ``"spark"``: Spark's Parquet reader on the files' Hadoop URIs (``s3a://``, needs
        hadoop-aws and ``fs.s3a.*`` settings), with column pruning. Same rows either way.

    Returns
    -------
    pyspark.sql.DataFrame
        The rows, in the committed schema's column order.

    Raises
    ------
    OptionError
        An unknown ``engine``, no active session, or a type Spark cannot represent.
    CorruptLogError
        The record has no schema.
    TableIntegrityError
        Some of the batch's files were compacted and vacuumed.

    Runs on
    -------
    driver"""
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

