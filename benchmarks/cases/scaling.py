"""Scaling: how this pack's throughput grows with Kafka partitions and with executors.

Three components, each measured the same way at every point:

- source: ``orderedkafka`` -> ``noop``, Trigger.AvailableNow, all records of one topic;
- ordered state: ``OrderedStateful`` with the ordered case's per-key order check
  (``benchmarks.cases._ordered_logic.check_order``; 50 records per key), state and output on S3;
  the order violations it finds must be 0;
- state store: one Spark task per state partition puts its share of the keys (100-byte values)
  into a fresh ``RocksDBStateStore`` partition on S3 and commits it (one full snapshot upload).

Points: 1, 2, 4, 8 Kafka (= state) partitions in ``local[2]`` (``scale_points`` of them: the
``tiny`` size runs 1 and 2 only), then a Spark standalone cluster of 2 workers x 1 core with
4 partitions, once with one executor (``spark.cores.max=1``) and once with two. Each point is
reported against the same component's first point (ratio = speedup). With 2 cores on the
machine, local[2] cannot go beyond 2x; more partitions than cores show the per-partition
overhead instead. Each configuration (local, cluster) runs in its own process, and each Spark
session first runs one unreported round (JVM warm-up, Python workers started) before its points
(not at size ``tiny``, whose figures only show that the case works).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cases._streaming import run_engine, run_query, spark_session
from benchmarks.common import CaseContext, Result

PARTITION_POINTS = (1, 2, 4, 8)
CLUSTER_PARTITIONS = 4
EXECUTOR_POINTS = (1, 2)
KEYS_PER_RECORD = 50  # ordered state: records per key
COMPONENTS = ("source", "ordered state", "state store")


def fill_partition(partition: int, keys: int, url: str, storage_options: dict[str, Any],
                   ) -> float:
    """Executor side: put ``keys`` keys into state partition ``partition`` and commit it;
    returns the task's seconds."""
    from orderedstream.statestore import EMPTY_VERSION, BytesCodec, StateLocation, StateStoreOptions
    from orderedstream.statestore.rocksdb.store import RocksDBStateStore

    started = time.perf_counter()
    local = tempfile.mkdtemp(prefix=f"scale-store-{partition}-")
    try:  # closed, not kept open in the worker: its local copy is removed after the task
        store = RocksDBStateStore(StateLocation(url, storage_options=storage_options),
                                  StateStoreOptions(local_dir=local, codec=BytesCodec(),
                                                    keep_open=0))
        value = b"v" * 100
        with store.open(partition, EMPTY_VERSION) as part:
            part.put_many((b"key-%03d-%010d" % (partition, i), value) for i in range(keys))
            part.commit(0)
        return time.perf_counter() - started
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _source(spark: Any, ctx: CaseContext, topic: str, work: Path) -> dict[str, Any]:
    query = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", ctx.bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").load()
             .writeStream.format("noop")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="cp-source-", dir=work))
             .trigger(availableNow=True).start())
    return run_query(query)


def _ordered(spark: Any, ctx: CaseContext, topic: str, work: Path, tag: str,
             ) -> dict[str, Any]:
    from benchmarks.cases._ordered_logic import check_order
    from orderedstream.statestore.ordered import OrderedStateful

    base = ctx.s3_url("bench-scaling", tag)
    checkpoint = tempfile.mkdtemp(prefix="cp-ordered-", dir=work)
    processor = OrderedStateful(
        check_order, state_location=f"{base}/state", output=f"{base}/out",
        output_schema="key binary, partition int, offset long, seq long, violation int",
        storage_options=ctx.storage_options, writer_id="bench-scaling",
        checkpoint_location=checkpoint)
    query = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", ctx.bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(processor.process_batch)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    figures = run_query(query)
    violations = processor.table().to_arrow().column("violation").to_pylist()
    figures["violations"] = sum(violations)
    figures["output_rows"] = len(violations)
    return figures


def _state_store(spark: Any, ctx: CaseContext, keys: int, partitions: int, tag: str,
                 ) -> dict[str, Any]:
    url = ctx.s3_url("bench-scaling", tag, "store")
    options = dict(ctx.storage_options)
    per = keys // partitions
    rdd = spark.sparkContext.parallelize(range(partitions), partitions)
    started = time.perf_counter()
    task_s = rdd.map(lambda p: fill_partition(p, per, url, options)).collect()
    seconds = time.perf_counter() - started
    return {"records": per * partitions, "seconds": seconds,
            "records_per_s": per * partitions / seconds, "task_s": [round(s, 2) for s in task_s]}


def _measure(spark: Any, ctx: CaseContext, params: dict[str, Any], partitions: int,
             tag: str, work: Path) -> dict[str, dict[str, Any]]:
    topics = params["topics"]
    return {
        "source": _source(spark, ctx, topics[str(partitions)]["source"], work),
        "ordered state": _ordered(spark, ctx, topics[str(partitions)]["ordered"], work, tag),
        "state store": _state_store(spark, ctx, params["keys"], partitions, tag),
    }


def engine_main(engine: str, ctx: CaseContext, params: dict[str, Any]) -> dict[str, Any]:
    """``local``: every partition point in local[2]; ``cluster``: 1 then 2 executors."""
    from pyspark import cloudpickle

    import benchmarks.cases._ordered_logic as ordered_logic
    import benchmarks.cases.ordered as ordered

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(ordered)
    cloudpickle.register_pickle_by_value(ordered_logic)
    work = Path(params["work"]) / engine
    work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%H%M%S")
    out: dict[str, Any] = {}
    if engine == "local":
        spark = spark_session("bench-scaling-local", work / "spark", 4)
        try:
            if params["warmup"]:
                first = params["partition_points"][0]
                _measure(spark, ctx, params, first, f"{stamp}-local-warmup", work)
            for p in params["partition_points"]:
                out[str(p)] = _measure(spark, ctx, params, p, f"{stamp}-local-{p}", work)
        finally:
            spark.stop()
        return out
    from orderedstream.dev.services.spark import SparkStandaloneCluster

    cluster = SparkStandaloneCluster(work / "cluster", workers=max(EXECUTOR_POINTS),
                                     cores=1).start()
    try:
        for executors in EXECUTOR_POINTS:
            spark = cluster.session(f"bench-scaling-{executors}", conf={
                "spark.cores.max": str(executors),
                "spark.sql.streaming.numRecentProgressUpdates": "100000",
                "spark.sql.shuffle.partitions": "4"})
            try:
                _wait_executors(spark, executors)
                if params["warmup"]:
                    _measure(spark, ctx, params, CLUSTER_PARTITIONS,
                             f"{stamp}-cluster-{executors}-warmup", work)
                out[str(executors)] = _measure(spark, ctx, params, CLUSTER_PARTITIONS,
                                               f"{stamp}-cluster-{executors}", work)
            finally:
                spark.stop()
    finally:
        cluster.stop()
    return out


def _wait_executors(spark: Any, wanted: int, timeout: float = 120.0) -> None:
    """Block until ``wanted`` executors registered (so the first point is not half-empty)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
        if status.size() - 1 >= wanted:  # the driver counts as one
            return
        time.sleep(0.5)
    raise TimeoutError(f"{wanted} executors did not register within {timeout:.0f}s")


def run(ctx: CaseContext) -> list[Result]:
    """benchmarks.run case: produce one topic per partition count, run local then cluster."""
    from benchmarks.cases.ordered import produce as produce_ordered
    from benchmarks.cases.source import _produce as produce_source

    records = ctx.scale.get("scale_records", 200_000)
    points = list(PARTITION_POINTS[: ctx.scale.get("scale_points", len(PARTITION_POINTS))])
    ordered_records = records // 2
    keys = max(10, ordered_records // KEYS_PER_RECORD)
    stamp = time.strftime("%H%M%S")
    topics: dict[str, dict[str, str]] = {}
    for p in sorted({*points, CLUSTER_PARTITIONS}):
        names = {"source": f"bench-scale-src-{stamp}-{p}",
                 "ordered": f"bench-scale-ord-{stamp}-{p}"}
        produce_source(ctx, names["source"], records, p)
        produce_ordered(ctx.bootstrap, names["ordered"], ordered_records, p, keys)
        topics[str(p)] = names
    work = Path(tempfile.mkdtemp(prefix="scaling-", dir=ctx.workdir))
    params = {"work": str(work), "topics": topics, "keys": records,
              "partition_points": points, "warmup": ctx.size != "tiny"}
    local = run_engine(__name__, "local", ctx, params, work)
    cluster = run_engine(__name__, "cluster", ctx, params, work)

    results: list[Result] = []
    units = {"source": "records/s", "ordered state": "records/s", "state store": "keys/s"}
    sizes = {"source": f"{records:,} records of 100 B",
             "ordered state": f"{ordered_records:,} records over {keys:,} keys, state and "
                              "output on S3",
             "state store": f"{records:,} keys of 100 B, split over the partitions, one "
                            "commit each to S3"}
    for component in COMPONENTS:
        first = local[str(points[0])][component]["records_per_s"]
        for p in points:
            figures = local[str(p)][component]
            results.append(Result(
                "scaling", f"{component}, {p} partition{'s' * (p > 1)} (local[2])",
                units[component], figures["records_per_s"], first,
                f"same at {points[0]} partition", f"{sizes[component]}, local[2]",
                extra=_extra(component, figures, partitions=p, executors=None)))
        one = cluster[str(EXECUTOR_POINTS[0])][component]["records_per_s"]
        for executors in EXECUTOR_POINTS:
            figures = cluster[str(executors)][component]
            results.append(Result(
                "scaling", f"{component}, {executors} executor{'s' * (executors > 1)} "
                f"(standalone, {CLUSTER_PARTITIONS} partitions)", units[component],
                figures["records_per_s"], one, f"same with {EXECUTOR_POINTS[0]} executor",
                f"{sizes[component]}, standalone cluster, 1-core executors",
                extra=_extra(component, figures, partitions=CLUSTER_PARTITIONS,
                             executors=executors)))
    bad = [r for r in results if r.extra.get("violations")]
    if bad:
        raise RuntimeError(f"order violations in the scaling runs: {[r.metric for r in bad]}")
    return results


def _extra(component: str, figures: dict[str, Any], partitions: int,
           executors: int | None) -> dict[str, Any]:
    """What the scaling chart needs (``scaling``), plus the run's own numbers."""
    extra: dict[str, Any] = {"scaling": True, "component": component, "partitions": partitions,
                             "executors": executors, "seconds": round(figures["seconds"], 2)}
    for key in ("violations", "batches"):
        if key in figures:
            extra[key] = figures[key]
    return extra
