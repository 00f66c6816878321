"""What one look at a query's progress costs once it has 13 batches (session 17).

Usage: ``.venv/bin/python benchmarks/results/20261127-s17/progress_poll_cost.py``

``query.recentProgress`` returns every retained batch's progress (a py4j call and a JSON
document each); ``query.lastProgress`` one. Prints the CPU milliseconds per call of the driver's
Python and of the JVM, and the wall time, over 50 calls each.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

import psutil
from pyspark.sql import functions as F  # noqa: N812

from orderedstream.dev.services.spark import local_spark_session

WORK = tempfile.mkdtemp(prefix="progress-poll-")
spark = local_spark_session("progress-poll", master="local[2]", tmp_dir=WORK,
                            conf={"spark.sql.streaming.numRecentProgressUpdates": "100000",
                                  "spark.sql.shuffle.partitions": "2"})
ME = psutil.Process()
JVM = next(c for c in ME.children(recursive=True) if "java" in c.name())


def cost(call: Callable[[], object], n: int = 50) -> tuple[float, float, float]:
    a, b, t = ME.cpu_times(), JVM.cpu_times(), time.perf_counter()
    for _ in range(n):
        call()
    a2, b2 = ME.cpu_times(), JVM.cpu_times()
    return ((a2.user + a2.system - a.user - a.system) / n * 1000,
            (b2.user + b2.system - b.user - b.system) / n * 1000,
            (time.perf_counter() - t) / n * 1000)


if __name__ == "__main__":
    df = spark.readStream.format("rate").option("rowsPerSecond", 100).load()
    df = df.observe("m", *[F.coalesce(F.sum("value"), F.expr("0")).cast("long").alias(f"c{i}")
                           for i in range(8)], F.count("value").alias("n"))
    query = (df.writeStream.format("noop").trigger(processingTime="100 milliseconds")
             .option("checkpointLocation", f"{WORK}/cp").start())
    while len(query.recentProgress) < 13:
        time.sleep(0.2)
    query.stop()
    print("progress entries", len(query.recentProgress))
    for name, call in (("recentProgress", lambda: query.recentProgress),
                       ("lastProgress", lambda: query.lastProgress)):
        cost(call, 10)
        py, jvm, wall = cost(call)
        print(f"{name} ms per call: python {py:.2f} jvm {jvm:.2f} wall {wall:.2f}")
    spark.stop()
