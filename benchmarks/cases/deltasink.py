"""Delta sink: ``fenceddelta`` (Data Source) and ``DeltaBatchWriter`` (foreachBatch) vs Spark's
``format("parquet")`` and the fenced Parquet Data Source (``fencedparquet``).

Same stream as the ``sink`` case (local Parquet input files, one micro-batch per file,
Trigger.AvailableNow, local[2], SeaweedFS S3; Spark's sink through s3a://). Every kind first
makes one unmeasured warm-up run (the session's first queries pay JVM class loading, s3a's
client setup and Python worker imports, which would land on whichever kind runs first); then
``RUNS`` rounds, each kind once per round in a rotated order, and the median is reported.
Commit latency: the driver-side Delta commit of a batch of 8 files on S3 (check + one Delta
commit + read back), from a warm committer (foreachBatch keeps one) and from a fresh one (a
Data Source commit runs in a fresh process), repeated.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cases.sink import _bytes_under, _make_input
from benchmarks.common import CaseContext, Result

RUNS = 5
KINDS = ("fenceddelta", "deltaForeachBatch", "fencedparquet", "parquet")


def _run(spark: Any, ctx: CaseContext, source: Path, kind: str) -> tuple[float, float]:
    """One AvailableNow run; returns (rows/s, MB/s of Parquet written)."""
    import fsspec

    from orderedstream.sinks.deltaforeach import DeltaBatchWriter

    url = ctx.s3_url(f"bench-dsink-{kind}-{time.time_ns()}")
    checkpoint = tempfile.mkdtemp(prefix=f"bench-{kind}-", dir=ctx.workdir)
    df = (spark.readStream.schema("id long, k int, payload string")
          .option("maxFilesPerTrigger", 1).parquet(str(source)))
    writer = df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if kind in ("fenceddelta", "fencedparquet"):
        writer = (writer.format(kind).option("path", url).option("writerId", "bench")
                  .option("storageOptions", json.dumps(ctx.storage_options)))
    elif kind == "deltaForeachBatch":
        writer = writer.foreachBatch(DeltaBatchWriter(url, storage_options=ctx.storage_options,
                                                      writer_id="bench"))
    else:
        writer = (writer.format("parquet").option("compression", "zstd")
                  .option("path", url.replace("s3://", "s3a://", 1)))
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    fs, root = fsspec.core.url_to_fs(url, **ctx.storage_options)
    return rows / seconds, _bytes_under(fs, root.rstrip("/")) / seconds / 2**20


def commit_latency(ctx: CaseContext, *, fresh: bool, repeats: int = 30) -> list[float]:
    """Seconds per driver-side Delta commit of 8 files (prepare + publish)."""
    from dataclasses import replace

    import pyarrow as pa

    from orderedstream.core.datafile import DataFile
    from orderedstream.sinks.deltacommit import DeltaCommitter, DeltaPrepared
    from orderedstream.sinks.options import FencedParquetOptions

    url = ctx.s3_url(f"bench-dcommit-{time.time_ns()}")
    options = replace(FencedParquetOptions.from_mapping(
        {"path": url, "storage_options": ctx.storage_options}), file_stats=True)
    schema = pa.schema([("id", pa.int64())])
    warm = DeltaCommitter(options, app_id="bench")
    seconds = []
    for batch in range(repeats):
        files = [DataFile(f"part-{batch}-{i}.parquet", 1 << 20, 1000,
                          stats={"numRecords": 1000, "minValues": {"id": 0},
                                 "maxValues": {"id": 999}, "nullCount": {"id": 0}})
                 for i in range(8)]
        offsets = {"t/0": [batch * 1000, batch * 1000 + 1000]}
        started = time.perf_counter()
        committer = DeltaCommitter(options, app_id="bench") if fresh else warm
        prepared = committer.prepare(batch, schema, lambda o=offsets: o)
        assert isinstance(prepared, DeltaPrepared)
        committer.publish(prepared, files, offsets=offsets)
        seconds.append(time.perf_counter() - started)
    return seconds[1:]  # batch 0 creates the table


def _latency_result(name: str, latency: list[float], how: str) -> Result:
    ordered = sorted(latency)
    return Result("deltasink", name, "ms", 1000 * statistics.median(latency), 100.0,
                  "target 100 ms", how, higher_is_better=False,
                  extra={"p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 1),
                         "max_ms": round(1000 * ordered[-1], 1)})


def run(ctx: CaseContext) -> list[Result]:
    from orderedstream.dev.services.jars import hadoop_aws_jars
    from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY
    from orderedstream.dev.services.spark import local_spark_session, s3a_conf
    from orderedstream.sinks.datasource import FencedParquetDataSource
    from orderedstream.sinks.deltasource import FencedDeltaDataSource

    source = Path(tempfile.mkdtemp(prefix="bench-dsink-in-", dir=ctx.workdir))
    rows = _make_input(source, ctx.scale["rows"])
    creds = ctx.storage_options
    spark = local_spark_session("bench-deltasink", conf={
        "spark.jars": ",".join(hadoop_aws_jars()),
        **s3a_conf(ctx.s3_endpoint, creds.get("key", ACCESS_KEY),
                   creds.get("secret", SECRET_KEY)),
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"})
    spark.dataSource.register(FencedParquetDataSource)
    spark.dataSource.register(FencedDeltaDataSource)
    for kind in KINDS:  # warm-up, not measured
        _run(spark, ctx, source, kind)
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
    for round_ in range(RUNS):
        for kind in KINDS[round_ % len(KINDS):] + KINDS[:round_ % len(KINDS)]:
            runs[kind].append(_run(spark, ctx, source, kind))
    spark.stop()
    how = (f"{rows:,} rows (~100 B each) in 8 micro-batches from local Parquet, AvailableNow, "
           f"local[2], to SeaweedFS S3; median of {RUNS} rotated rounds after a warm-up "
           f"run of each kind")
    med = {k: (statistics.median(r for r, _ in v), statistics.median(m for _, m in v))
           for k, v in runs.items()}
    results = []
    for kind in ("fenceddelta", "deltaForeachBatch"):
        for peer in ("parquet", "fencedparquet"):
            label = "format('parquet') via s3a" if peer == "parquet" else "fencedparquet sink"
            results.append(Result("deltasink", f"{kind} rows/s vs {peer}", "rows/s",
                                  med[kind][0], med[peer][0], label, how,
                                  extra={"runs": [round(r) for r, _ in runs[kind]],
                                         "peer_runs": [round(r) for r, _ in runs[peer]]}))
        results.append(Result("deltasink", f"{kind} MB/s vs parquet", "MB/s", med[kind][1],
                              med["parquet"][1], "format('parquet') via s3a", how))
    results.append(_latency_result(
        "Delta commit latency p50 (warm committer)", commit_latency(ctx, fresh=False),
        "check + one Delta commit of 8 files on S3, foreachBatch-style committer, 29 batches"))
    results.append(_latency_result(
        "Delta commit latency p50 (fresh committer)", commit_latency(ctx, fresh=True),
        "the same from a new committer per batch (a Data Source commit process), 29 batches"))
    return results
