"""The pipelined Parquet writer (row groups encoded and uploaded by a background thread while
input still arrives), on local disk and real S3: row groups bounded by rows and by bytes,
sizes and Delta statistics that match the data, errors from either thread raised, nothing
committed from a failed write."""

from __future__ import annotations

import os
from dataclasses import replace

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from orderedstream.core.errors import OptionError
from orderedstream.core.storage import fs_options
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.writer import write_parquet_files


def rows(start: int, n: int, size: int = 2000):
    for offset in range(start, start + n, size):
        ids = pa.array(range(offset, min(offset + size, start + n)), pa.int64())
        yield pa.RecordBatch.from_pydict({
            "id": ids, "x": pc.multiply(ids, -3),
            "s": pa.array([None if i % 7 == 0 else f"v{i:07d}" for i in ids.to_pylist()])})


def test_row_groups_bounded_by_bytes_and_rows_stats_match_data(target) -> None:
    url, opts = target("pipe")
    options = replace(FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "rowGroupBytes": "100KB",
         "rowGroupRows": "100000", "targetFileSize": "1GB"}), file_stats=True)
    files = write_parquet_files(rows(0, 50_000), options, "t0")
    assert len(files) == 1 and files[0].rows == 50_000
    fs, root = fsspec.core.url_to_fs(url, **fs_options(url, opts))
    path = f"{root.rstrip('/')}/{files[0].path}"
    assert fs.size(path) == files[0].size  # the size in the commit is the object's size
    meta = pq.ParquetFile(fs.open(path, "rb")).metadata
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    # 2000-row input batches of ~54 KB: a group closes once it holds 100 KB (2 batches)
    assert groups == [4000] * 12 + [2000]
    data = pq.read_table(fs.open(path, "rb"))
    assert data["id"].to_pylist() == list(range(50_000))  # order kept across groups
    stats = files[0].stats
    assert stats is not None and stats["numRecords"] == 50_000
    assert stats["minValues"] == {"id": 0, "x": -3 * 49_999, "s": "v0000001"}
    assert stats["maxValues"] == {"id": 49_999, "x": 0, "s": "v0049999"}
    assert stats["nullCount"] == {"id": 0, "x": 0, "s": data["s"].null_count}
    assert data["s"].null_count == len(range(0, 50_000, 7))


def test_files_roll_at_target_size_while_pipelined(target) -> None:
    url, opts = target("roll")
    options = FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "rowGroupRows": "2000",
         "targetFileSize": "40KB"})
    files = write_parquet_files(rows(0, 40_000), options, "t0")
    fs, root = fsspec.core.url_to_fs(url, **fs_options(url, opts))
    sizes = [fs.size(f"{root.rstrip('/')}/{f.path}") for f in files]
    assert sizes == [f.size for f in files] and sum(f.rows for f in files) == 40_000
    # every file but the last rolled at the first row group that took it past the target
    assert len(files) > 4 and all(40_000 <= s < 40_000 + 30_000 for s in sizes[:-1])
    assert sizes[-1] < 40_000 + 30_000
    assert len({f.path for f in files}) == len(files)


def test_multipart_upload_overlapping_the_encoder_keeps_every_byte_in_order(s3_table) -> None:
    """~17 MB of incompressible rows: 4 parts of 5 MiB uploaded by the upload thread while
    later row groups are encoded; the object is exactly the bytes written, in order."""
    url, opts = s3_table("parts")
    options = replace(FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "compression": "none",
         "rowGroupBytes": "1MiB", "targetFileSize": "1GB"}), file_stats=True)

    def wide(n: int, size: int = 1000):
        for offset in range(0, n, size):
            ids = pa.array(range(offset, offset + size), pa.int64())
            yield pa.RecordBatch.from_pydict({"id": ids, "blob": pa.array(
                [random_bytes.hex() for random_bytes in (os.urandom(200) for _ in range(size))])})

    files = write_parquet_files(wide(40_000), options, "t0")
    assert len(files) == 1 and files[0].rows == 40_000
    fs, root = fsspec.core.url_to_fs(url, **fs_options(url, opts))
    path = f"{root.rstrip('/')}/{files[0].path}"
    assert fs.size(path) == files[0].size > 3 * 5 * 1024**2
    parquet = pq.ParquetFile(fs.open(path, "rb"))
    assert parquet.metadata.num_row_groups > 10
    data = parquet.read()
    assert data["id"].to_pylist() == list(range(40_000))
    assert all(len(v) == 400 for v in data["blob"].to_pylist())
    assert files[0].stats["maxValues"]["id"] == 39_999


class Boom(RuntimeError):
    pass


def test_error_in_input_is_raised_and_nothing_is_returned(target) -> None:
    url, opts = target("fail-input")
    options = FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "rowGroupRows": "2000"})

    def failing():
        yield from rows(0, 10_000)
        raise Boom("the JVM went away")

    with pytest.raises(Boom, match="JVM went away"):
        write_parquet_files(failing(), options, "t0")


def test_error_in_background_write_is_raised_in_the_caller(s3_table) -> None:
    url, opts = s3_table("x")
    missing = "s3://no-such-bucket-orderedstream/" + url.rsplit("/", 1)[-1]
    options = FencedParquetOptions.from_mapping(
        {"path": missing, "storageOptions": opts, "rowGroupRows": "2000"})
    with pytest.raises((FileNotFoundError, OSError, PermissionError)):
        write_parquet_files(rows(0, 30_000), options, "t0")


def test_row_group_bytes_option_is_validated() -> None:
    parsed = FencedParquetOptions.from_mapping({"path": "/x", "rowGroupBytes": "8MB"})
    assert parsed.row_group_bytes == 8 * 1000**2 or parsed.row_group_bytes == 8 * 1024**2
    assert FencedParquetOptions.from_mapping({"path": "/x"}).row_group_bytes == 8 * 1024**2
    with pytest.raises(OptionError, match="rowGroupBytes='lots' is not a size"):
        FencedParquetOptions.from_mapping({"path": "/x", "rowGroupBytes": "lots"})


def test_failed_write_to_s3_leaves_no_object_and_no_open_upload(s3_table) -> None:
    """An input error after a multipart upload began: the upload is aborted, so no object
    (not even a truncated one a folder reader would trip on) and no unfinished upload stay."""
    url, opts = s3_table("abort")
    options = FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "compression": "none",
         "rowGroupBytes": "1MiB", "targetFileSize": "1GB"})

    def failing():
        for offset in range(0, 30_000, 1000):
            ids = pa.array(range(offset, offset + 1000), pa.int64())
            yield pa.RecordBatch.from_pydict({"id": ids, "blob": pa.array(
                [os.urandom(200).hex() for _ in range(1000)])})
        raise Boom("the JVM went away")

    with pytest.raises(Boom):
        write_parquet_files(failing(), options, "t0")
    fs, root = fsspec.core.url_to_fs(url, **fs_options(url, opts))
    fs.invalidate_cache()
    assert fs.find(root) == []
    bucket, prefix = root.split("/", 1)
    uploads = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
    assert uploads.get("Uploads", []) == []
