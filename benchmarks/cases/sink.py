"""Sink: ``fencedparquet`` (Data Source and foreachBatch) vs Spark's ``format("parquet")``.

All three write the same stream (local Parquet input files, one micro-batch per file,
Trigger.AvailableNow) to the same S3 endpoint (Spark's sink through s3a://) in one Spark
session (local[2]); runs alternate and the median is reported. Commit latency per batch is
measured on its own: the driver-side commit (exclusive record + _spark_metadata) of a batch of
8 files on S3, repeated.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import CaseContext, Result

RUNS = 3
BATCHES = 8


def _make_input(directory: Path, rows: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    per = max(1, rows // BATCHES)
    for n in range(BATCHES):
        ids = pa.array(range(n * per, (n + 1) * per), pa.int64())
        pq.write_table(pa.table({"id": ids, "k": pa.array([i % 16 for i in range(per)],
                                                          pa.int32()),
                                 "payload": pa.array([os.urandom(40).hex()
                                                      for _ in range(per)])}),
                       directory / f"in-{n:03d}.parquet")
    return per * BATCHES


def _bytes_under(fs: Any, root: str) -> int:
    return sum(info["size"] for path, info in fs.find(root, detail=True).items()
               if path.endswith(".parquet") and "/_" not in path[len(root):])


def _run(spark: Any, ctx: CaseContext, source: Path, kind: str) -> tuple[float, float]:
    """One AvailableNow run; returns (rows/s, MB/s of Parquet written)."""
    import json

    from orderedstream.sinks.foreach import FencedParquetBatchWriter
    from orderedstream.sinks.table import FencedTable

    name = f"bench-sink-{kind}-{time.time_ns()}"
    url = ctx.s3_url(name)
    checkpoint = tempfile.mkdtemp(prefix=f"bench-{kind}-", dir=ctx.workdir)
    df = (spark.readStream.schema("id long, k int, payload string")
          .option("maxFilesPerTrigger", 1).parquet(str(source)))
    writer = df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if kind == "fencedparquet":
        writer = (writer.format("fencedparquet").option("path", url)
                  .option("storageOptions", json.dumps(ctx.storage_options)))
    elif kind == "foreachBatch":
        writer = writer.foreachBatch(FencedParquetBatchWriter(
            url, storage_options=ctx.storage_options))
    else:
        writer = (writer.format("parquet").option("compression", "zstd")
                  .option("path", url.replace("s3://", "s3a://", 1)))
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    table = FencedTable(url, ctx.storage_options)
    written = _bytes_under(table.fs, table.root)
    return rows / seconds, written / seconds / 2**20


def _commit_latency(ctx: CaseContext, repeats: int = 30) -> list[float]:
    import pyarrow as pa

    from orderedstream.core.commitlog import CommitLog
    from orderedstream.core.datafile import DataFile
    from orderedstream.sinks.commit import check_schema, publish_batch
    from orderedstream.sinks.options import FencedParquetOptions

    url = ctx.s3_url(f"bench-commit-{time.time_ns()}")
    options = FencedParquetOptions.from_mapping({"path": url,
                                                 "storage_options": ctx.storage_options})
    schema = check_schema(CommitLog(url, ctx.storage_options), options,
                          pa.schema([("id", pa.int64())]))
    seconds = []
    epoch = CommitLog(url, ctx.storage_options).claim_epoch("bench")
    for batch in range(repeats):
        files = [DataFile(f"part-{batch}-{i}.parquet", 1 << 20, 1000) for i in range(8)]
        log = CommitLog(url, ctx.storage_options)  # fresh, like a Data Source commit process
        started = time.perf_counter()
        if log.get(batch) is None:
            publish_batch(log, options, batch, epoch, files, schema)
        seconds.append(time.perf_counter() - started)
    return seconds


def run(ctx: CaseContext) -> list[Result]:
    from orderedstream.dev.services.jars import hadoop_aws_jars
    from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY
    from orderedstream.dev.services.spark import local_spark_session, s3a_conf
    from orderedstream.sinks.datasource import FencedParquetDataSource

    source = Path(tempfile.mkdtemp(prefix="bench-sink-in-", dir=ctx.workdir))
    rows = _make_input(source, ctx.scale["rows"])
    creds = ctx.storage_options
    spark = local_spark_session("bench-sink", conf={
        "spark.jars": ",".join(hadoop_aws_jars()),
        **s3a_conf(ctx.s3_endpoint, creds.get("key", ACCESS_KEY),
                   creds.get("secret", SECRET_KEY)),
        # SeaweedFS without identities refuses the SDK's chunk-signed uploads (400 "Signed
        # request requires setting up SeaweedFS S3 authentication") but accepts anonymous ones.
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"})
    spark.dataSource.register(FencedParquetDataSource)
    runs: dict[str, list[tuple[float, float]]] = {"fencedparquet": [], "foreachBatch": [],
                                                  "parquet": []}
    for _ in range(RUNS):
        for kind in runs:
            runs[kind].append(_run(spark, ctx, source, kind))
    spark.stop()
    latency = _commit_latency(ctx)
    how = (f"{rows:,} rows (~100 B each, 80 random hex chars) in {BATCHES} micro-batches "
           f"from local Parquet, AvailableNow, local[2], to SeaweedFS S3; median of {RUNS} "
           "alternating runs")
    base_rows = statistics.median(r for r, _ in runs["parquet"])
    base_mb = statistics.median(m for _, m in runs["parquet"])
    results = []
    for kind in ("fencedparquet", "foreachBatch"):
        results.append(Result("sink", f"{kind} write throughput", "rows/s",
                              statistics.median(r for r, _ in runs[kind]), base_rows,
                              "format('parquet') via s3a", how,
                              extra={"runs": [round(r) for r, _ in runs[kind]],
                                     "spark_runs": [round(r) for r, _ in runs["parquet"]]}))
        results.append(Result("sink", f"{kind} write bandwidth", "MB/s",
                              statistics.median(m for _, m in runs[kind]), base_mb,
                              "format('parquet') via s3a", how))
    ordered = sorted(latency)
    results.append(Result(
        "sink", "commit latency per batch (p50)", "ms", 1000 * statistics.median(latency), None,
        None, f"driver commit of 8 files on S3 from a fresh CommitLog, {len(latency)} batches",
        higher_is_better=False,
        extra={"p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 1),
               "max_ms": round(1000 * ordered[-1], 1)}))
    return results
