"""What ``Dataset.observe`` costs the driver JVM per micro-batch (session 17).

Usage: ``.venv/bin/python benchmarks/results/20261127-s17/observe_cost.py [spark.conf=value ...]``

A rate source (200 rows/s, one partition) repartitioned to 2 tasks, written to ``noop`` every
150 ms, local[2] with the main job's ``JOB_CONF``: plain, and observed with the main job's ten
aggregates (``full``: eight ``coalesce(sum) as long``, a max, a count), the same without
coalesce and casts (``sums``), and one count (``one``). Prints the JVM's CPU milliseconds per
batch over 40 batches after 15 warm ones, three rounds each.
"""

from __future__ import annotations

import sys
import tempfile
import time

import psutil
from pyspark.sql import functions as F  # noqa: N812

from orderedstream.dev.services.spark import JOB_CONF, local_spark_session

WORK = tempfile.mkdtemp(prefix="observe-cost-")
EXTRA = dict(a.split("=", 1) for a in sys.argv[1:])
spark = local_spark_session("observe-cost", master="local[2]", tmp_dir=WORK,
                            conf={**JOB_CONF, "spark.sql.shuffle.partitions": "2", **EXTRA})
JVM = next(c for c in psutil.Process().children(recursive=True) if "java" in c.name())


def columns(kind: str) -> list:
    if kind == "full":
        return ([F.coalesce(F.sum("value"), F.expr("0")).cast("long").alias(f"c{i}")
                 for i in range(8)]
                + [F.coalesce(F.max("value"), F.expr("0")).alias("mx"),
                   F.count("value").cast("long").alias("n")])
    if kind == "sums":
        return ([F.sum("value").alias(f"c{i}") for i in range(8)]
                + [F.max("value").alias("mx"), F.count("value").alias("n")])
    return [F.count("value").alias("n")]


def jvm_ms_per_batch(kind: str, batches: int = 40) -> float:
    df = (spark.readStream.format("rate").option("rowsPerSecond", 200)
          .option("numPartitions", 1).load().repartition(2))
    if kind != "plain":
        df = df.observe("m", *columns(kind))
    query = (df.writeStream.format("noop").trigger(processingTime="150 milliseconds")
             .option("checkpointLocation", f"{WORK}/cp-{time.time_ns()}").start())
    while (query.lastProgress or {}).get("batchId", -1) < 15:
        time.sleep(0.1)
    before, start = JVM.cpu_times(), query.lastProgress["batchId"]
    while query.lastProgress["batchId"] < start + batches:
        time.sleep(0.1)
    after, end = JVM.cpu_times(), query.lastProgress["batchId"]
    query.stop()
    used = after.user + after.system - before.user - before.system
    return used / (end - start) * 1000


if __name__ == "__main__":
    results: dict[str, list[int]] = {}
    for _ in range(3):
        for kind in ("full", "plain", "sums", "one"):
            results.setdefault(kind, []).append(round(jvm_ms_per_batch(kind)))
    print(EXTRA, results)
    spark.stop()
