"""Both entry points under real Spark: foreachBatch and format("fencedparquet"), on real S3
(SeaweedFS, read back by pyarrow, DuckDB and Spark via s3a) and on a local table path."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orderedstream.core.commitlog import CommitLog
from orderedstream.core.errors import FencedError, SchemaMismatchError
from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY
from orderedstream.dev.services.spark import s3a_conf
from orderedstream.sinks.datasource import FencedParquetDataSource
from orderedstream.sinks.foreach import FencedParquetBatchWriter
from orderedstream.sinks.maintenance import compact, vacuum
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.table import FencedTable
from orderedstream.sinks.writer import write_parquet_files

ROWS = 500
SCHEMA = "id long, k int, v string"


def make_input(directory: Path, files: int, start_file: int = 0) -> Path:
    """``files`` Parquet files of ROWS rows each (one micro-batch per file)."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(start_file, start_file + files):
        ids = list(range(n * ROWS, (n + 1) * ROWS))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "k": pa.array([i % 3 for i in ids], pa.int32()),
                                 "v": pa.array([f"v{i}" for i in ids])}),
                       directory / f"in-{n:03d}.parquet")
        # Spark's file source orders new files by modification time only: make it file order
        os.utime(directory / f"in-{n:03d}.parquet", (1_700_000_000 + n, 1_700_000_000 + n))
    return directory


def stream(spark: Any, directory: Path) -> Any:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(
        str(directory))


def committed_ids(url: str, opts: dict) -> list[int]:
    return sorted(FencedTable(url, opts).to_arrow()["id"].to_pylist())


def test_foreach_batch_crashes_and_replays_commit_exactly_once(spark, s3_table, tmp_path):
    url, opts = s3_table("fe")
    source = make_input(tmp_path / "in", 3)
    checkpoint = str(tmp_path / "ckpt")
    crashes = {"after_commit": 1, "before_commit": 2}

    class CrashingWriter(FencedParquetBatchWriter):
        def extra(self, batch_df, batch_id):  # runs after files are written, before commit
            if crashes.get("before_commit") == batch_id:
                crashes.pop("before_commit")
                raise RuntimeError("crash between file writes and commit")
            return super().extra(batch_df, batch_id)

    def run(sink: FencedParquetBatchWriter) -> None:
        def on_batch(df, batch_id):
            sink(df, batch_id)
            if crashes.get("after_commit") == batch_id:
                crashes.pop("after_commit")
                raise RuntimeError("crash after commit, before Spark's commits/N")

        query = (stream(spark, source).writeStream.foreachBatch(on_batch)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        except Exception as exc:  # noqa: BLE001 - the injected crash surfaces here
            assert "crash" in str(exc)

    first = CrashingWriter(url, storage_options=opts, writer_id="fe")
    run(first)  # batch 0 committed, batch 1 committed then the driver "crashed"
    assert committed_ids(url, opts) == list(range(2 * ROWS))
    second = CrashingWriter(url, storage_options=opts, writer_id="fe")
    run(second)  # replays batch 1 (skipped), crashes in batch 2 before its commit
    assert second.skipped == [1]
    assert committed_ids(url, opts) == list(range(2 * ROWS))  # batch 2's files invisible
    third = CrashingWriter(url, storage_options=opts, writer_id="fe")
    run(third)  # batch 2 written again and committed once
    ids = committed_ids(url, opts)
    assert ids == list(range(3 * ROWS))
    log = CommitLog(url, opts)
    assert [r.batch_id for r in log.records()] == [0, 1, 2]
    assert [r.epoch for r in log.records()] == [1, 1, 3]
    dataset = FencedTable(url, opts).dataset()  # noqa: F841 - read by DuckDB below
    assert duckdb.sql("select count(distinct id), count(*) from dataset").fetchall() == [
        (3 * ROWS, 3 * ROWS)]
    # the replayed batch 1 wrote no files (skipped early), batch 2's first attempt is orphaned
    orphans = vacuum(url, opts, grace_seconds=0, dry_run=True).deleted
    assert len(orphans) >= 1 and all(p.endswith(".parquet") for p in orphans)


def test_zombie_run_is_fenced_even_after_writing_files(spark, s3_table):
    url, opts = s3_table("zombie")
    df = spark.createDataFrame([(i, i % 2, f"v{i}") for i in range(100)], SCHEMA)
    zombie = FencedParquetBatchWriter(url, storage_options=opts, writer_id="run-1")
    zombie(df, 0)
    successor = FencedParquetBatchWriter(url, storage_options=opts, writer_id="run-2")

    class Interleaved(FencedParquetBatchWriter):
        def extra(self, batch_df, batch_id):  # the successor claims while we write
            successor.claim()
            return super().extra(batch_df, batch_id)

    late = Interleaved(url, storage_options=opts, writer_id="run-1")
    late.epoch = zombie.epoch  # the same old run, files already on S3 when it is fenced
    with pytest.raises(FencedError, match="run-1.*fenced"):
        late(df.selectExpr("id + 1000 as id", "k", "v"), 1)
    with pytest.raises(FencedError, match="fenced"):
        zombie(df.selectExpr("id + 2000 as id", "k", "v"), 1)
    successor(df.selectExpr("id + 3000 as id", "k", "v"), 1)
    assert committed_ids(url, opts) == list(range(100)) + list(range(3000, 3100))


def test_schema_change_fails_before_writing(spark, s3_table):
    url, opts = s3_table("schema")
    sink = FencedParquetBatchWriter(url, storage_options=opts)
    sink(spark.createDataFrame([(1, 1, "a")], SCHEMA), 0)
    sink(spark.createDataFrame([(2, 1, "b", 2.5)], SCHEMA + ", extra double"), 1)
    table = FencedTable(url, opts)
    files_before = table.fs.find(table.root)
    with pytest.raises(SchemaMismatchError, match="'id' changed type from int64 to string"):
        sink(spark.createDataFrame([("3", 1, "c")], "id string, k int, v string"), 2)
    table.fs.invalidate_cache()
    assert table.fs.find(table.root) == files_before  # nothing written
    assert FencedTable(url, opts).to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "k": 1, "v": "a", "extra": None}, {"id": 2, "k": 1, "v": "b", "extra": 2.5}]


def test_datasource_sink_on_s3_exactly_once_and_fenced_second_query(spark, s3, s3_table,
                                                                   tmp_path):
    spark.dataSource.register(FencedParquetDataSource)
    url, opts = s3_table("ds")
    source = make_input(tmp_path / "in", 2)

    def start(checkpoint: str, src: Path) -> Any:
        return (stream(spark, src).writeStream.format("fencedparquet")
                .option("path", url).option("storageOptions", json.dumps(opts))
                .option("partitionBy", "k").option("checkpointLocation", checkpoint)
                .trigger(availableNow=True).start())

    start(str(tmp_path / "ck-a"), source).awaitTermination()
    assert committed_ids(url, opts) == list(range(2 * ROWS))
    dataset = FencedTable(url, opts).dataset()  # noqa: F841
    assert duckdb.sql("select k, count(*) from dataset group by k order by k").fetchall() == [
        (0, 334), (1, 333), (2, 333)]
    # a second query (own checkpoint) on the same path is refused; the data stays consistent
    other = make_input(tmp_path / "in-b", 1, start_file=50)
    with pytest.raises(Exception, match="already committed by writer 'checkpoint:"):
        start(str(tmp_path / "ck-b"), other).awaitTermination()
    assert committed_ids(url, opts) == list(range(2 * ROWS))
    # the first query resumes (takes the epoch back) and commits its next batch once
    make_input(source, 1, start_file=2)
    start(str(tmp_path / "ck-a"), source).awaitTermination()
    assert committed_ids(url, opts) == list(range(3 * ROWS))
    assert [r.batch_id for r in CommitLog(url, opts).records()] == [0, 1, 2]
    # the refused query's files are on S3 but listed nowhere: Spark (s3a), like pyarrow,
    # reads exactly the committed rows through _spark_metadata
    assert len(vacuum(url, opts, grace_seconds=0, dry_run=True).deleted) >= 1
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(s3.endpoint, ACCESS_KEY, SECRET_KEY, prefix="").items():
        hadoop.set(key, value)
    s3a_url = url.replace("s3://", "s3a://", 1)
    assert sorted(r.id for r in spark.read.parquet(s3a_url).select("id").collect()) == list(
        range(3 * ROWS))


def test_spark_read_parquet_sees_exactly_committed_rows(spark, tmp_path):
    """spark.read.parquet on a file:// table, through compaction and vacuum."""
    spark.dataSource.register(FencedParquetDataSource)
    url = str(tmp_path / "table")
    source = make_input(tmp_path / "in", 12)
    (stream(spark, source).writeStream.format("fencedparquet").option("path", url)
     .option("partitionBy", "k").option("checkpointLocation", str(tmp_path / "ck"))
     .trigger(availableNow=True).start().awaitTermination())
    write_parquet_files(  # an uncommitted attempt's file: on disk, never listed
        [pa.RecordBatch.from_pydict({"id": pa.array([-1], pa.int64()),
                                     "v": pa.array(["orphan"])})],
        FencedParquetOptions.from_mapping({"path": url + "/k=0"}), "orphan")
    expected = list(range(12 * ROWS))

    def spark_ids() -> list[int]:
        return sorted(r.id for r in spark.read.parquet(url).select("id").collect())

    assert spark_ids() == expected  # 12 versions: 9.compact + 10 + 11 read
    assert sorted(spark.read.parquet(url).where("k = 1").select("id").toPandas()["id"]) == [
        i for i in expected if i % 3 == 1]
    result = compact(url, target_file_bytes=64 * 1024**2)
    assert result.removed == 36 and result.added == 3
    assert spark_ids() == expected
    assert committed_ids(url, {}) == expected
    vacuum(url, grace_seconds=0)
    assert spark_ids() == expected


def test_two_concurrent_queries_on_one_path_one_survives_consistent(spark, s3_table, tmp_path):
    """Two queries write one path at once: the writer that claimed the path last survives and
    commits all of its input; the other is refused before it commits anything."""
    url, opts = s3_table("two")
    inputs = {"a": make_input(tmp_path / "in-a", 4), "b": make_input(tmp_path / "in-b", 4,
                                                                        start_file=100)}
    sinks = {name: FencedParquetBatchWriter(url, storage_options=opts, writer_id=f"query-{name}")
             for name in inputs}
    for name in ("a", "b"):  # b claims the path after a: b owns it, a is fenced
        sinks[name].claim()
    queries = {name: (stream(spark, directory).writeStream.foreachBatch(sinks[name])
                      .option("checkpointLocation", str(tmp_path / f"ck-{name}"))
                      .trigger(availableNow=True).start())
               for name, directory in inputs.items()}
    errors = {}
    for name, query in queries.items():
        try:
            query.awaitTermination()
        except Exception as exc:  # noqa: BLE001 - the refused query fails here
            errors[name] = str(exc)
    assert set(errors) == {"a"}, f"expected only query a to be refused, got {errors}"
    assert "CommitConflictError" in errors["a"] or "FencedError" in errors["a"]
    log = CommitLog(url, opts)
    records = list(log.records())
    assert {r.writer_id for r in records} == {"query-b"}  # a committed nothing
    ids = committed_ids(url, opts)
    assert len(ids) == len(set(ids)) == sum(r.rows for r in records)  # no duplicates
    assert {i // ROWS for i in ids} == set(range(100, 104))  # all of b's input, whole files
    assert sorted(ids) == list(range(100 * ROWS, 104 * ROWS))
    assert [r.batch_id for r in records] == sorted({r.batch_id for r in records})


def test_datasource_refuses_bad_options_and_schema_before_writing(spark, s3_table, tmp_path):
    spark.dataSource.register(FencedParquetDataSource)
    url, opts = s3_table("dserr")
    source = make_input(tmp_path / "in", 1)

    def start(df: Any, **options: str) -> Any:
        writer = (df.writeStream.format("fencedparquet").option("path", url)
                  .option("storageOptions", json.dumps(opts))
                  .option("checkpointLocation", str(tmp_path / f"ck-{len(options)}-{id(df)}"))
                  .trigger(availableNow=True))
        for key, value in options.items():
            writer = writer.option(key, value)
        return writer.start()

    with pytest.raises(Exception, match="compression='lzo' is not supported; accepted: zstd"):
        start(stream(spark, source), compression="lzo").awaitTermination()
    with pytest.raises(Exception, match="partitionBy column.*'day'"):
        start(stream(spark, source), partitionBy="day").awaitTermination()
    start(stream(spark, source)).awaitTermination()
    assert committed_ids(url, opts) == list(range(ROWS))
    table = FencedTable(url, opts)
    before = sorted(table.fs.find(table.root))
    changed = stream(spark, source).selectExpr("cast(id as string) as id", "k", "v")
    with pytest.raises(Exception, match="'id' changed type from int64 to string"):
        start(changed).awaitTermination()
    table.fs.invalidate_cache()
    assert sorted(table.fs.find(table.root)) == before  # refused before any task wrote a file


def test_escaped_partition_values_read_back_in_spark_and_pyarrow(spark, tmp_path):
    from orderedstream.sinks.commit import check_schema, publish_batch

    url = str(tmp_path / "table with space")
    options = FencedParquetOptions.from_mapping({"path": url, "partitionBy": "p,q"})
    batch = pa.RecordBatch.from_pydict({"id": [1, 2, 3, 4], "p": ["a/b", "x y", None, "c=d%"],
                                        "q": [1, None, 2, 2]})
    log = CommitLog(url)
    publish_batch(log, options, 0, log.claim_epoch("w"), write_parquet_files([batch], options),
                  check_schema(log, options, batch.schema))
    expected = [(1, "a/b", 1), (2, "x y", None), (3, None, 2), (4, "c=d%", 2)]
    assert sorted(tuple(r) for r in spark.read.parquet(url).select("id", "p", "q").collect()) \
        == expected
    assert [tuple(r.values()) for r in FencedTable(url).to_arrow().sort_by("id").to_pylist()] \
        == expected


@pytest.mark.parametrize("sink", ["fencedparquet", "fenceddelta"])
def test_an_unwritable_output_is_named_first_before_any_task(spark, s3, sink, tmp_path):
    """A path under a regular file, a bucket that does not exist: the query fails as it
    starts, the sink's LocationError naming the URL within Spark's first 400 characters."""
    from orderedstream.sinks.deltasource import FencedDeltaDataSource

    spark.dataSource.register(FencedParquetDataSource)
    spark.dataSource.register(FencedDeltaDataSource)
    source = make_input(tmp_path / "in", 1)
    (tmp_path / "a-file").write_text("not a folder")
    bucket = f"no-such-bucket-{os.getpid()}"
    for url, opts, cause in [(str(tmp_path / "a-file" / "out"), {},
                              " is not writable (NotADirectoryError"),
                             (f"s3://{bucket}/{sink}", s3.storage_options,
                              f": bucket '{bucket}' does not exist")]:
        query = (stream(spark, source).writeStream.format(sink).option("path", url)
                 .option("storageOptions", json.dumps(opts))
                 .option("checkpointLocation", str(tmp_path / f"ck-{len(url)}"))
                 .trigger(availableNow=True).start())
        with pytest.raises(Exception) as failed:
            query.awaitTermination(120)
        text = str(failed.value)
        expected = f"LocationError: {sink} output location '{url}'{cause}"
        assert expected in text, text[:2000]
        assert text.index(expected) < 400, text[:2000]
    assert (tmp_path / "a-file").read_text() == "not a folder"


def test_delta_writer_without_offsets_refuses_a_second_checkpoints_batches(spark, tmp_path):
    """DeltaBatchWriter on a frame without Kafka offset columns: a query with a new checkpoint
    under the same writer_id numbers its batches from 0 again; they were skipped as replays
    (their rows lost). The streaming query ids differ: refused now."""
    from orderedstream.core.errors import CommitConflictError
    from orderedstream.sinks.deltaforeach import DeltaBatchWriter

    url = str(tmp_path / "events")
    source = make_input(tmp_path / "in", 2)

    def run(checkpoint: str) -> tuple[DeltaBatchWriter, Any]:
        sink = DeltaBatchWriter(url, writer_id="events")
        query = (stream(spark, source).writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / checkpoint))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination(300)
        except Exception:  # noqa: BLE001 - the failure is read from the query below
            pass
        return sink, query.exception()

    first, error = run("ckpt-1")
    assert error is None and first.skipped == []
    again, error = run("ckpt-1")  # a restart from the same checkpoint: nothing new, no error
    assert error is None
    _, error = run("ckpt-2")
    assert error is not None and "already committed by writer 'events' from streaming query" \
        in str(error), error
    assert "CommitConflictError" in str(error) or isinstance(error, CommitConflictError)
    from deltalake import DeltaTable

    assert DeltaTable(url).to_pyarrow_table().num_rows == 2 * ROWS  # nothing lost or doubled
