"""The driver JVM's CPU for pieces of the main job's start, each in a fresh local session with
the job's settings (session 27). Usage (under the benchmark lock), one mode per process:

- ``python start_costs.py bare``: the session alone, then a trivial ``count`` job;
- ``python start_costs.py sql``: the stage's ``mapInArrow`` with a DDL schema string and its
  observed metrics as SQL text (``F.expr``), built and analysed;
- ``python start_costs.py cols``: the same with a ``StructType`` and column functions with JVM
  literals (tried in session 27: 0.09 s less here, no difference in the whole job; not kept).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import psutil

from orderedstream.core.jvm import map_in_arrow
from orderedstream.dev.services import jvmarchive
from orderedstream.dev.services.spark import (
    JOB_CONF,
    JOB_ENVIRONMENT,
    JOB_JAVA_OPTIONS,
    local_spark_session,
)

EXTRA = os.environ.get("START_COSTS_JAVA_OPTIONS", "")
"""More driver JVM options (session 30: a JDK 25 AOT cache, ``-XX:AOTCache=FILE``)."""

NAMES = ("records", "output_rows", "output_files", "state_keys", "state_bytes", "restores",
         "bytes_downloaded", "timeouts")


def literal(value: float) -> Any:
    """A literal Column from the JVM's ``functions.lit`` (``F.lit`` imports pandas)."""
    from pyspark import SparkContext
    from pyspark.sql.column import Column

    assert SparkContext._jvm is not None
    return Column(SparkContext._jvm.org.apache.spark.sql.functions.lit(value))  # type: ignore[call-arg]


def same(batches: Any) -> Any:
    yield from batches


def stage(spark: Any, mode: str) -> Any:
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    if mode == "sql":
        cols = [F.expr(f"CAST(coalesce(sum(`{n}`), 0) AS BIGINT) AS `{n}`") for n in NAMES]
        cols += [F.expr("coalesce(max(`state_commit_ms`), 0.0D) AS `state_commit_ms`"),
                 F.expr("CAST(count(`partition`) AS BIGINT) AS `kafka_partitions`")]
        schema: Any = (", ".join(f"{n} bigint" for n in NAMES)
                       + ", state_commit_ms double, partition string")
    else:
        cols = [F.coalesce(F.sum(n), literal(0)).cast(LongType()).alias(n) for n in NAMES]
        cols += [F.coalesce(F.max("state_commit_ms"), literal(0.0)).alias("state_commit_ms"),
                 F.count("partition").cast(LongType()).alias("kafka_partitions")]
        schema = StructType([*(StructField(n, LongType()) for n in NAMES),
                             StructField("state_commit_ms", DoubleType()),
                             StructField("partition", StringType())])
    df = map_in_arrow(spark.range(4), same, schema).observe("x", *cols)
    return df._jdf.queryExecution().analyzed()


def main(mode: str) -> None:
    spark = local_spark_session("start-costs", master="local[2]", conf=JOB_CONF,
                                java_options=(f"{JOB_JAVA_OPTIONS} {jvmarchive.java_options()} "
                                              f"{EXTRA}"),
                                environment=JOB_ENVIRONMENT)
    jvm = next(p for p in psutil.Process().children(recursive=True) if "java" in p.name())

    def cpu() -> float:
        times = jvm.cpu_times()
        return times.user + times.system

    try:
        if mode == "bare":
            print(f"session: JVM CPU {cpu():.2f} s")
            spark.range(10).count()
            print(f"+ a count job: JVM CPU {cpu():.2f} s")
            return
        before, began = cpu(), time.perf_counter()
        stage(spark, mode)
        print(f"{mode}: JVM CPU {cpu() - before:.3f} s, wall {time.perf_counter() - began:.3f} s")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
