"""Compaction, vacuum, verify and the CLI on local disk and real S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa

from orderedstream.core.commitlog import CommitLog
from orderedstream.sinks.cli import verify
from orderedstream.sinks.commit import check_schema, publish_batch
from orderedstream.sinks.maintenance import compact, vacuum
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.table import FencedTable, apply_records
from orderedstream.sinks.writer import write_parquet_files


def fill(url: str, opts: dict, batches: int, rows: int = 200) -> FencedParquetOptions:
    options = FencedParquetOptions.from_mapping({"path": url, "storage_options": opts,
                                                 "partition_by": ["k"]})
    log = CommitLog(url, opts)
    epoch = log.claim_epoch("q")
    for b in range(batches):
        ids = list(range(b * rows, (b + 1) * rows))
        batch = pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                            "k": pa.array([i % 2 for i in ids], pa.int64())})
        publish_batch(log, options, b, epoch, write_parquet_files([batch], options),
                      check_schema(log, options, batch.schema))
    return options


def spark_log_files(table: FencedTable) -> set[str]:
    """What Spark would read: latest .compact plus later deltas (interval 10)."""
    names = {n.rsplit("/", 1)[-1] for n in table.fs.ls(f"{table.root}/_spark_metadata",
                                                         detail=False)}
    last = max(int(n.removesuffix(".compact")) for n in names)
    start = max(0, (last + 1) // 10 * 10 - 1)
    paths = set()
    for i in range(start, last + 1):
        name = f"{i}.compact" if (i + 1) % 10 == 0 else str(i)
        lines = table.fs.cat_file(f"{table.root}/_spark_metadata/{name}").decode().splitlines()
        assert lines[0] == "v1"
        paths |= {json.loads(line)["path"] for line in lines[1:]}
    return paths


def test_compaction_is_atomic_and_keeps_every_reader_consistent(target) -> None:
    url, opts = target("compact")
    fill(url, opts, batches=6)
    table = FencedTable(url, opts)
    before = table.to_arrow().sort_by("id")
    old_files = {f.path for f in table.snapshot().files}
    assert len(old_files) == 12
    result = compact(url, opts, target_file_bytes=64 * 1024**2)
    assert (result.removed, result.added, result.rows) == (12, 2, 1200)
    assert (result.record.version + 1) % 10 == 0  # landed on a _spark_metadata compact point
    after_table = FencedTable(url, opts)
    snap = after_table.snapshot()
    assert {f.path for f in snap.files}.isdisjoint(old_files) and len(snap.files) == 2
    assert after_table.to_arrow().sort_by("id").equals(before)
    # Spark's view is exactly the new file set, and older versions still read the old set
    assert spark_log_files(after_table) == {after_table.spark_uri(f.path) for f in snap.files}
    assert FencedTable(url, opts).to_arrow(version=5).sort_by("id").equals(before)
    # the stream keeps appending after a compaction; deltas still add up
    options = FencedParquetOptions.from_mapping({"path": url, "storage_options": opts,
                                                 "partition_by": ["k"]})
    log = CommitLog(url, opts)
    batch = pa.RecordBatch.from_pydict({"id": pa.array([5000], pa.int64()),
                                        "k": pa.array([0], pa.int64())})
    publish_batch(log, options, 6, log.claim_epoch("q2"), write_parquet_files([batch], options),
                  check_schema(log, options, batch.schema))
    final = FencedTable(url, opts)
    assert final.to_arrow().num_rows == 1201
    assert spark_log_files(final) == {final.spark_uri(f.path) for f in final.snapshot().files}
    assert verify(url, opts) == []


def test_vacuum_removes_only_unreferenced_files_past_grace(target) -> None:
    url, opts = target("vacuum")
    options = fill(url, opts, batches=3)
    orphans = write_parquet_files(
        [pa.RecordBatch.from_pydict({"id": pa.array([9], pa.int64()),
                                     "k": pa.array([1], pa.int64())})], options, "crashed")
    compact(url, opts)
    table = FencedTable(url, opts)
    rows = table.to_arrow().num_rows
    young = vacuum(url, opts, grace_seconds=3600)
    assert young.deleted == () and young.kept_recent == len(orphans) + 6
    later = time.time() + 7200
    dry = vacuum(url, opts, grace_seconds=3600, now=later, dry_run=True)
    assert len(dry.deleted) == len(orphans) + 6
    done = vacuum(url, opts, grace_seconds=3600, now=later)
    assert done.deleted == dry.deleted
    assert {o.path for o in orphans} <= set(done.deleted)
    assert FencedTable(url, opts).to_arrow().num_rows == rows == 600
    assert verify(url, opts) == []
    remaining = [p for p in table.fs.find(table.root) if p.endswith(".parquet")]
    assert len(remaining) == len(FencedTable(url, opts).snapshot().files)


def test_verify_reports_missing_and_resized_files(target) -> None:
    url, opts = target("verify")
    fill(url, opts, batches=2)
    table = FencedTable(url, opts)
    files = sorted(table.snapshot().files, key=lambda f: f.path)
    table.fs.rm(table.full_path(files[0].path))
    table.fs.pipe_file(table.full_path(files[1].path), b"short")
    problems = verify(url, opts)
    assert sorted(problems) == [
        f"missing: {files[0].path}",
        f"size mismatch: {files[1].path} is 5 bytes, recorded {files[1].size}"]


def test_cli_lists_batches_and_verifies(s3_table, s3) -> None:
    url, opts = s3_table("cli")
    fill(url, opts, batches=2)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "orderedstream.sinks", *args, url,
                               "--s3-endpoint", s3.endpoint], capture_output=True, text=True,
                              timeout=120, env={**os.environ, **s3.aws_env()})

    batches = run("batches")
    assert batches.returncode == 0, batches.stderr
    lines = batches.stdout.splitlines()
    assert len(lines) == 3 and lines[1].split()[:5] == ["0", "0", "1", "2", "200"]
    files = run("files")
    assert files.stdout.splitlines()[-1] == "4 files, 400 rows, version 1"
    assert run("verify").stdout.strip() == "OK"
    compacted = run("compact", "--target-size", "128MB")  # 'table compact''s name for it
    assert "compacted 4 files into 2 (400 rows)" in compacted.stdout, compacted.stderr
    assert "0 file(s) deleted" in run("vacuum", "--retention-hours", "1").stdout
    negative = run("vacuum", "--grace-seconds", "-1")
    assert negative.returncode == 2
    assert "OptionError: --grace-seconds -1 is negative" in negative.stderr


def test_checkpoints_and_spark_log_expiry_keep_views_equal(target) -> None:
    url, opts = target("long")
    fill(url, opts, batches=32, rows=10)
    table = FencedTable(url, opts)
    checkpoints = sorted(p.rsplit("/", 1)[-1] for p in table.fs.ls(
        f"{table.root}/_fenced/checkpoints", detail=False))
    assert checkpoints == [f"{v:020d}.json" for v in (9, 19, 29)]
    replayed = apply_records(list(CommitLog(url, opts).records()))
    snap = FencedTable(url, opts).snapshot()
    assert {f.path: f for f in snap.files} == replayed and snap.rows == 320
    assert {f.path for f in FencedTable(url, opts).snapshot(15).files} == set(
        apply_records(list(CommitLog(url, opts).records(0, 15))))
    result = vacuum(url, opts, grace_seconds=3600, now=time.time() + 7200)
    assert sorted(result.deleted) == sorted(
        [f"_spark_metadata/{i}" for i in range(19) if i != 9] + ["_spark_metadata/9.compact"])
    assert spark_log_files(FencedTable(url, opts)) == {table.spark_uri(p) for p in replayed}
