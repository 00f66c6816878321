"""Executor-side writing and the committed view, on local disk and real S3 (no Spark)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from orderedstream.core.commitlog import CommitLog
from orderedstream.core.errors import OptionError, SchemaMismatchError
from orderedstream.sinks.commit import check_schema, publish_batch
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.schema import evolve
from orderedstream.sinks.table import FencedTable
from orderedstream.sinks.writer import write_parquet_files


def batches(start: int, n: int, size: int = 1000):
    for offset in range(start, start + n, size):
        ids = pa.array(range(offset, min(offset + size, start + n)), pa.int64())
        yield pa.RecordBatch.from_pydict({
            "id": ids, "day": pc.cast(pc.bit_wise_and(ids, 1), pa.int32()),
            "payload": pa.array([f"row-{i}" * 5 for i in ids.to_pylist()])})


def test_partitioned_bounded_files_commit_and_read_everywhere(target) -> None:
    url, opts = target("tbl")
    options = FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "partitionBy": "day", "rowGroupRows": "2000",
         "targetFileSize": "20KB"})
    log = CommitLog(url, opts)
    epoch = log.claim_epoch("q")
    schema = next(batches(0, 1)).schema
    for batch_id in range(3):
        files = write_parquet_files(batches(batch_id * 10_000, 10_000), options, f"b{batch_id}")
        # bounded files, Hive dirs, exact row counts
        assert len(files) > 2 and sum(f.rows for f in files) == 10_000
        assert {f.partition["day"] for f in files} == {"0", "1"}
        assert all(f.path.startswith(f"day={f.partition['day']}/part-") for f in files)
        publish_batch(log, options, batch_id, epoch, files, check_schema(log, options, schema))
    table = FencedTable(url, opts)
    got = table.to_arrow().sort_by("id")
    assert got.num_rows == 30_000 and got["id"].to_pylist() == list(range(30_000))
    assert got["day"].type == pa.int32()
    assert pc.all(pc.equal(got["day"], pc.cast(pc.bit_wise_and(got["id"], 1), pa.int32()))).as_py()
    dataset = table.dataset()  # noqa: F841 - DuckDB scans the Python variable
    count, distinct = duckdb.sql("select count(*), count(distinct id) from dataset").fetchall()[0]
    assert (count, distinct) == (30_000, 30_000)
    # uncommitted files (a failed attempt) are invisible
    write_parquet_files(batches(99_000, 500), options, "orphan")
    assert FencedTable(url, opts).to_arrow().num_rows == 30_000
    # _spark_metadata mirrors the commits (v1 lines, one per file)
    fs = table.fs
    entry = fs.cat_file(f"{table.root}/_spark_metadata/1").decode().splitlines()
    assert entry[0] == "v1" and len(entry) - 1 == len(CommitLog(url, opts).get(1).files)


def test_schema_evolution_rules() -> None:
    base = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())])
    wider = pa.schema(list(base) + [pa.field("extra", pa.float64(), True)])
    assert evolve(base, wider, "t").names == ["id", "s", "extra"]
    assert evolve(wider, base.append(pa.field("extra", pa.float64())), "t") == wider
    with pytest.raises(SchemaMismatchError, match="'id' changed type from int64 to string"):
        evolve(base, pa.schema([pa.field("id", pa.string()), pa.field("s", pa.string())]), "t")
    with pytest.raises(SchemaMismatchError, match="'s' .*is missing"):
        evolve(base, pa.schema([pa.field("id", pa.int64())]), "t")
    with pytest.raises(SchemaMismatchError, match="new column 'n' must be nullable"):
        evolve(base, base.append(pa.field("n", pa.int32(), False)), "t")
    with pytest.raises(SchemaMismatchError, match="partitionBy column.*'day'"):
        evolve(None, base, "t", ("day",))


def test_added_nullable_column_reads_back_with_nulls(target) -> None:
    url, opts = target("evolve")
    options = FencedParquetOptions.from_mapping({"path": url, "storage_options": opts})
    log = CommitLog(url, opts)
    epoch = log.claim_epoch("q")
    first = pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64())})
    second = pa.RecordBatch.from_pydict({"id": pa.array([3], pa.int64()),
                                         "note": pa.array(["x"], pa.string())})
    publish_batch(log, options, 0, epoch, write_parquet_files([first], options),
                  check_schema(log, options, first.schema))
    publish_batch(log, options, 1, epoch, write_parquet_files([second], options),
                  check_schema(log, options, second.schema))
    got = FencedTable(url, opts).to_arrow().sort_by("id").to_pylist()
    assert got == [{"id": 1, "note": None}, {"id": 2, "note": None}, {"id": 3, "note": "x"}]
    bad = pa.schema([pa.field("id", pa.string())])
    with pytest.raises(SchemaMismatchError, match=f"table {url}"):
        check_schema(log, options, bad)


@pytest.mark.parametrize("options, message", [
    ({}, "needs option 'path'"),
    ({"path": "/x", "compression": "lzo"}, "compression='lzo' is not supported; accepted"),
    ({"path": "/x", "targetFileSize": "big"}, "targetFileSize='big' is not a size"),
    ({"path": "/x", "rowGroupRows": "0"}, "rowGroupRows='0' is out of range"),
    ({"path": "/x", "metadataCompactInterval": "20"}, "out of range: use 1..10"),
    ({"path": "/x", "partitionBy": "a,a"}, "names a column twice"),
    ({"path": "/x", "storageOptions": "{nope"}, "storageOptions is not valid JSON"),
    ({"path": "/x", "colour": "red"}, "unknown fencedparquet option 'colour'; accepted"),
])
def test_option_errors_name_the_option(options, message) -> None:
    with pytest.raises(OptionError, match=message):
        FencedParquetOptions.from_mapping(options)


def test_option_parsing() -> None:
    o = FencedParquetOptions.from_mapping({"path": "s3://b/t/", "compression": "SNAPPY",
                                           "targetFileSize": "64MB", "partitionBy": "a, b",
                                           "checkpointLocation": "/ck"})
    assert (o.path, o.compression, o.target_file_bytes, o.partition_by) == (
        "s3://b/t", "snappy", 64 * 1024**2, ("a", "b"))
