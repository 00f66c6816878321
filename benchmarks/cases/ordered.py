"""Ordered stateful processing vs Spark's grouped stateful operators (RocksDB state store).

Usage::

    .venv/bin/python -m benchmarks.cases.ordered --records 1000000 --partitions 4 --keys 20000
    .venv/bin/python -m benchmarks.cases.ordered --records 200000 --spill-threshold 2000

The engines read the same topic through ``orderedkafka`` in one ``Trigger.AvailableNow``
streaming query each and run the same logic: per key, values are 0, 1, 2, ... in production
order; the state is the last value seen, and a record whose value is not last + 1 counts as an
order violation (an output column). Each engine gets the columns the logic reads (key, value,
partition, offset: ``columns=`` for ours, a ``select`` before ``groupBy`` for Spark's). The
engines:

- ``ordered``: this pack's ``OrderedStateful`` (one narrow stage, per record, in offset order),
  fed by ``orderedkafka`` with ``emit=ranges`` (the recommended setup: its tasks read Kafka
  themselves, so records never cross the JVM);
- ``ordered_records``: the same with the default ``emit=records`` (records go source worker ->
  JVM -> ``mapInArrow`` worker), to show what reading in the task saves;
- ``pandas``: ``groupBy("key").applyInPandasWithState`` (shuffle, sort by key, pandas frames);
- ``tws``: ``groupBy("key").transformWithStateInPandas`` (Spark 4's state API v2, ValueState).

Output goes to local Parquet in all three, state to local disk (Spark's RocksDB state store
provider for both Spark operators), ``local[2]``. Each engine runs in its own Python process
with its own Spark JVM (``benchmarks.cases._streaming.run_engine``), so its peak RSS (sampled
over the process tree) and its timing are its own.

The spill run (``--spill-threshold N``) sets ``spark.shuffle.spill.numElementsForceSpillThreshold
= N``: Spark's ``UnsafeExternalSorter`` (used by the sort before the grouped operator) spills to
disk every N rows, then merges the spill files by key only, so one key's rows from different
spill files may come back in any order. Our stage has no shuffle or sort: it must show 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cases._ordered_logic import (
    COLUMNS,
    OUTPUT_DDL,
    CheckOrderProcessor,
    check_order,
    check_order_pandas,
)

ENGINES = ("ordered", "ordered_records", "pandas", "tws")
OURS = ("ordered", "ordered_records", "ordered_delta", "ordered_inplan")
# ordered_delta: cases/ordereddelta.py; ordered_inplan (Delta, the stage in the query's plan,
# apply + commit_batch): cases/inplan.py
BASELINE_NAMES = {"pandas": "groupBy().applyInPandasWithState",
                  "tws": "groupBy().transformWithStateInPandas"}
SPILL_CONF = "spark.shuffle.spill.numElementsForceSpillThreshold"


# ---- data --------------------------------------------------------------------------------
def produce(bootstrap: str, topic: str, records: int, partitions: int, keys: int) -> None:
    """``records`` records over ``keys`` keys; each key's values are 0, 1, 2, ... in order.

    The producer is idempotent, so retries cannot reorder a partition (without it, retried
    requests under load put a few values out of order in Kafka itself, and every engine then
    "finds" the same violations).
    """
    from confluent_kafka import Producer

    from benchmarks.cases._streaming import create_topic

    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000, "enable.idempotence": True})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % (i % keys), value=b"%d" % (i // keys))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(300):
        raise RuntimeError("benchmark data was not fully delivered")


# ---- one engine, in its own process --------------------------------------------------------
def engine_main(engine: str, ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Run ``engine`` over ``params["topic"]``; records/s, violations, peak RSS, spill."""
    from pyspark import cloudpickle

    from benchmarks.cases._streaming import spark_session
    from benchmarks.common import RssSampler

    # The user functions travel by value: executors (cluster workers) cannot import benchmarks.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(sys.modules["benchmarks.cases._ordered_logic"])
    work = Path(params["work"]) / engine
    work.mkdir(parents=True, exist_ok=True)
    conf = {}
    if params.get("spill_threshold"):
        conf[SPILL_CONF] = str(params["spill_threshold"])
    spark = spark_session(f"ordered-bench-{engine}", work / "spark", params["partitions"],
                          conf=conf)
    def source_of(topic: str) -> Any:
        reader = (spark.readStream.format("orderedkafka")
                  .option("kafka.bootstrap.servers", ctx.bootstrap).option("subscribe", topic)
                  .option("emit", "ranges" if engine in ("ordered", "ordered_delta",
                                                         "ordered_inplan") else "records")
                  .option("startingOffsets", "earliest"))
        if params.get("max_offsets_per_trigger"):  # several batches (default: one)
            reader = reader.option("maxOffsetsPerTrigger", str(params["max_offsets_per_trigger"]))
        return reader.load()

    try:
        if params.get("warmup_topic"):  # a running stream's state: workers up, imports done
            warm, _ = _start(engine, spark, source_of(params["warmup_topic"]), work / "warmup")
            warm.awaitTermination()
            if warm.exception() is not None:
                raise RuntimeError(f"{engine} warm-up query failed: {warm.exception()}")
        before = len(_stages(spark) or [])
        source = source_of(params["topic"])
        with RssSampler() as rss:
            started = time.perf_counter()
            query, read = _start(engine, spark, source, work)
            query.awaitTermination()
            seconds = time.perf_counter() - started
        if query.exception() is not None:
            raise RuntimeError(f"{engine} query failed: {query.exception()}")
        rows, violations = read()
        progress = query.recentProgress
        stages = _stages(spark)
        stages = None if stages is None else stages[before:]
        return {"engine": engine, "seconds": seconds, "rows": rows,
                "records_per_s": rows / seconds if seconds else 0.0,
                "violations": int(violations or 0), "peak_rss_mb": round(rss.peak_mb, 1),
                "batches": sum(1 for p in progress if p.get("numInputRows")),
                "duration_ms": _phases(progress),
                "spilled_bytes": (None if stages is None
                                  else sum(s["spilled_bytes"] for s in stages)),
                "stages": stages}
    finally:
        spark.stop()


def _start(engine: str, spark: Any, source: Any, work: Path) -> tuple[Any, Any]:
    """Start ``engine``'s query; returns it and a function giving (output rows, violations)."""
    if engine in OURS:
        from orderedstream.statestore.ordered import OrderedStateful

        proc = OrderedStateful(check_order, state_location=f"file://{work}/state",
                               output=f"file://{work}/out", output_schema=OUTPUT_DDL,
                               columns=COLUMNS, output_format=(
                                   "delta" if engine in ("ordered_delta", "ordered_inplan")
                                   else "parquet"))
        in_plan = engine == "ordered_inplan"
        query = ((proc.apply(source) if in_plan else source).writeStream
                 .foreachBatch(proc.commit_batch if in_plan else proc.process_batch)
                 .option("checkpointLocation", str(work / "checkpoint"))
                 .trigger(availableNow=True).start())

        def read_ours() -> tuple[int, int]:
            table = proc.table().to_arrow()
            return table.num_rows, sum(table["violation"].to_pylist())
        return query, read_ours
    grouped = source.select("key", *COLUMNS).groupBy("key")
    if engine == "pandas":
        frame = grouped.applyInPandasWithState(check_order_pandas, OUTPUT_DDL, "last long",
                                               "append", "NoTimeout")
    elif engine == "tws":
        frame = grouped.transformWithStateInPandas(
            statefulProcessor=CheckOrderProcessor(), outputStructType=OUTPUT_DDL,
            outputMode="Append", timeMode="None")
    else:
        raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(ENGINES)}")
    out = str(work / "out")
    query = (frame.writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())

    def read_spark() -> tuple[int, int]:
        row = spark.read.parquet(out).selectExpr("count(*)", "sum(violation)").collect()[0]
        return int(row[0]), int(row[1] or 0)
    return query, read_spark


def _phases(progress: list[dict[str, Any]]) -> dict[str, int]:
    """Spark's per-phase batch durations (``durationMs``), summed over the query's batches."""
    total: dict[str, int] = {}
    for p in progress:
        for phase, ms in p.get("durationMs", {}).items():
            total[phase] = total.get(phase, 0) + int(ms)
    return total


def _stages(spark: Any) -> list[dict[str, Any]] | None:
    """Every stage Spark ran (its status store): name, tasks, wall, task run and CPU seconds,
    bytes spilled to disk. None when the status store cannot be read."""
    try:
        sc = spark.sparkContext
        empty = sc._gateway.new_array(sc._jvm.double, 0)
        stages = sc._jsc.sc().statusStore().stageList(None, False, False, empty, None)
        out = []
        for i in range(stages.size()):
            stage = stages.apply(i)
            began, ended = stage.submissionTime(), stage.completionTime()
            wall = (ended.get().getTime() - began.get().getTime()) / 1000 if (
                began.isDefined() and ended.isDefined()) else None
            out.append({"stage": stage.stageId(), "name": stage.name(),
                        "tasks": stage.numTasks(), "wall_s": wall,
                        "run_s": stage.executorRunTime() / 1000,
                        "cpu_s": round(stage.executorCpuTime() / 1e9, 3),
                        "spilled_bytes": stage.diskBytesSpilled()})
        return sorted(out, key=lambda s: s["stage"])
    except Exception:  # noqa: BLE001 - a reporting nicety, never fail the run for it
        return None


# ---- the comparison ------------------------------------------------------------------------
def measure(ctx: Any, topic: str, records: int, partitions: int, work: Path,
            engines: tuple[str, ...] = ENGINES, spill_threshold: int | None = None,
            warmup_topic: str | None = None, max_offsets_per_trigger: int | None = None,
            ) -> dict[str, dict[str, Any]]:
    """Each engine over ``topic`` in its own process (after a query over ``warmup_topic`` in
    the same session, when given); engine -> its figures. Every engine's output must have
    exactly ``records`` rows (complete, nothing duplicated)."""
    from benchmarks.cases._streaming import run_engine

    params = {"topic": topic, "partitions": partitions, "work": str(work),
              "spill_threshold": spill_threshold, "warmup_topic": warmup_topic,
              "max_offsets_per_trigger": max_offsets_per_trigger}
    results = {}
    for engine in engines:
        res = run_engine("benchmarks.cases.ordered", engine, ctx, params, work / engine)
        if res["rows"] != records:
            raise RuntimeError(f"{engine}: {res['rows']} output rows for {records} records")
        results[engine] = res
    return results


def spill_threshold_for(records: int, partitions: int) -> int:
    """Rows per forced spill: about 25 spill files per shuffle partition's sort."""
    return max(100, records // partitions // 25)


def available_engines() -> tuple[str, ...]:
    """The engines this environment can run: ``transformWithStateInPandas`` needs protobuf."""
    import importlib.util

    if importlib.util.find_spec("google.protobuf") is None:
        print("ordered bench: protobuf is not installed, so transformWithStateInPandas is "
              "skipped (pip install 'protobuf>=6.33.5,<7')", file=sys.stderr)
        return ("ordered", "ordered_records", "pandas")
    return ENGINES


def run(ctx: Any) -> list[Any]:
    """benchmarks.run case: throughput of the three engines, then order violations with
    Spark's sort forced to spill (a smaller topic, same logic)."""
    from benchmarks.common import Result

    engines = available_engines()
    records = ctx.scale.get("ordered_records", ctx.scale["records"])
    partitions = ctx.scale["partitions"]
    keys = max(10, records // 50)
    stamp = int(time.time())
    work = Path(tempfile.mkdtemp(prefix="ordered-", dir=ctx.workdir))
    topic = f"bench-ordered-{stamp}"
    produce(ctx.bootstrap, topic, records, partitions, keys)
    warmup_records = max(1000, records // 50)
    produce(ctx.bootstrap, f"{topic}-warmup", warmup_records, partitions,
            max(10, warmup_records // 50))
    res = measure(ctx, topic, records, partitions, work / "throughput", engines,
                  warmup_topic=f"{topic}-warmup")
    spill_records = min(records, 200_000)
    spill_keys = max(10, spill_records // 50)
    threshold = spill_threshold_for(spill_records, partitions)
    spill_topic = f"bench-ordered-spill-{stamp}"
    produce(ctx.bootstrap, spill_topic, spill_records, partitions, spill_keys)
    spill = measure(ctx, spill_topic, spill_records, partitions, work / "spill",
                    tuple(e for e in engines if e != "ordered_records"), spill_threshold=threshold)
    baselines = [e for e in ("pandas", "tws") if e in engines]

    how = (f"{records:,} records over {partitions} partitions and {keys:,} keys, orderedkafka "
           "Trigger.AvailableNow in every engine (ours with emit=ranges: its tasks read Kafka), "
           "same per-key logic, Parquet output and state "
           "on local disk, Spark's RocksDB state store provider for the Spark operators, "
           f"local[2], each engine in its own process (peak RSS of its process tree), timed "
           f"after a {warmup_records:,}-record warm-up query in the same session (Python "
           "workers started and imports done, as in a running stream)")
    spill_how = (f"{spill_records:,} records over {partitions} partitions and {spill_keys:,} "
                 f"keys; spill induced with {SPILL_CONF}={threshold} (Spark's "
                 "UnsafeExternalSorter, the sort by key before the grouped operator, writes a "
                 f"spill file every {threshold:,} rows and merges them by key only), "
                 f"spark.sql.shuffle.partitions={partitions}; Spark spilled "
                 + ", ".join(f"{BASELINE_NAMES[e]} {_mib(spill[e]['spilled_bytes'])}"
                             for e in baselines)
                 + "; our stage has no shuffle/sort (0 required, output complete)")
    results = [Result(
        "ordered state", "records/s: emit=ranges vs emit=records", "records/s",
        res["ordered"]["records_per_s"], res["ordered_records"]["records_per_s"],
        "OrderedStateful fed Kafka rows through the JVM (emit=records)",
        how.split(", orderedkafka")[0] + "; both ours, same run, same warm-up",
        extra={e: {k: res[e][k] for k in ("seconds", "peak_rss_mb")}
               for e in ("ordered", "ordered_records")})]
    for engine in baselines:
        name = BASELINE_NAMES[engine]
        figures = {e: {k: res[e][k] for k in ("seconds", "peak_rss_mb", "batches")}
                   for e in ("ordered", engine)}
        results += [
            Result("ordered state", "records/s", "records/s", res["ordered"]["records_per_s"],
                   res[engine]["records_per_s"], name, how, extra=figures),
            Result("ordered state", "peak RSS", "MiB", res["ordered"]["peak_rss_mb"],
                   res[engine]["peak_rss_mb"], name, how, higher_is_better=False),
            Result("ordered state", "order violations", "records",
                   res["ordered"]["violations"], res[engine]["violations"], name,
                   "records whose per-key value was not last + 1 (must be 0); " + how,
                   higher_is_better=False),
            Result("ordered state (sort spill)", "order violations", "records",
                   spill["ordered"]["violations"], spill[engine]["violations"], name,
                   spill_how, higher_is_better=False,
                   extra={"spilled_bytes": spill[engine]["spilled_bytes"],
                          "spill_threshold": threshold}),
        ]
    return results


def profile_executor(records: int, keys: int, all_columns: bool, top: int = 15) -> None:
    """The ordered stage's task body alone (no Spark, no Kafka): ``records`` records of one
    Kafka partition in 10,000-row Arrow batches through ``OrderedTask`` on a local store, once
    timed (CPU seconds) and once under cProfile; prints records/s and the top costs."""
    import cProfile
    import pstats

    import pyarrow as pa

    from orderedstream.statestore.ordered import OrderedStateful
    from orderedstream.statestore.ordered.plan import BatchPlan
    from orderedstream.statestore.ordered.runner import OrderedTask

    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC")),
                        ("timestampType", pa.int32())])
    batches = []
    for start in range(0, records, 10_000):
        offsets = list(range(start, min(records, start + 10_000)))
        n = len(offsets)
        batches.append(pa.RecordBatch.from_pydict({
            "key": [b"k%d" % (o % keys) for o in offsets],
            "value": [b"%d" % (o // keys) for o in offsets], "topic": ["bench"] * n,
            "partition": [0] * n, "offset": offsets,
            "timestamp": [1_700_000_000_000_000 + o for o in offsets],
            "timestampType": [0] * n}, schema=schema))
    for profiled in (False, True):
        work = Path(tempfile.mkdtemp(prefix="ordered-profile-"))
        proc = OrderedStateful(
            check_order, state_location=f"file://{work}/state", output=f"file://{work}/out",
            output_schema=pa.schema([("key", pa.binary()), ("partition", pa.int32()),
                                     ("offset", pa.int64()), ("seq", pa.int64()),
                                     ("violation", pa.int32())]),
            columns=None if all_columns else COLUMNS,
            store_options={"local_dir": str(work / "local")})
        task = OrderedTask(proc.options, proc.func, BatchPlan(0, int(time.time() * 1000)),
                           proc.sink)
        profiler = cProfile.Profile(time.process_time)
        cpu = time.process_time()
        if profiled:
            profiler.enable()
        list(task(iter(batches)))
        profiler.disable()
        cpu = time.process_time() - cpu
        shutil.rmtree(work, ignore_errors=True)
        label = "under cProfile" if profiled else "plain"
        decoded = "all columns" if all_columns else f"columns={COLUMNS}"
        print(f"{label}: {records:,} records in {cpu:.2f} CPU s = {records / cpu:,.0f} "
              f"records per CPU second ({decoded})")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def _mib(value: int | None) -> str:
    return "unknown bytes" if value is None else f"{value / 2**20:,.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--only", default=",".join(ENGINES),
                        help=f"comma-separated engines of {', '.join(ENGINES)}")
    parser.add_argument("--spill-threshold", type=int, default=None,
                        help=f"set {SPILL_CONF} (rows per forced spill of Spark's sorts)")
    parser.add_argument("--profile-executor", action="store_true",
                        help="profile the ordered task body alone (no Spark), then exit")
    parser.add_argument("--all-columns", action="store_true",
                        help="with --profile-executor: decode every input column")
    args = parser.parse_args()
    if args.profile_executor:
        profile_executor(args.records, args.keys, args.all_columns)
        return
    engines = tuple(e.strip() for e in args.only.split(",") if e.strip())
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engine(s) {unknown}; accepted: {', '.join(ENGINES)}")

    from benchmarks.common import CaseContext
    from orderedstream.dev.services.kafka import KafkaBroker

    work = Path(tempfile.mkdtemp(prefix="ordered-bench-"))
    broker = KafkaBroker(work / "kafka").start()
    try:
        ctx = CaseContext(broker.bootstrap, "", {}, "", str(work), "cli",
                          {"records": args.records, "partitions": args.partitions})
        produce(broker.bootstrap, "bench", args.records, args.partitions, args.keys)
        results = measure(ctx, "bench", args.records, args.partitions, work, engines,
                          args.spill_threshold)
    finally:
        broker.kill()
        shutil.rmtree(work, ignore_errors=True)
    for name, r in results.items():
        print(f"{name:8s} {r['rows']} records in {r['seconds']:6.1f} s = "
              f"{r['records_per_s']:8,.0f} records/s, order violations {r['violations']}, "
              f"peak RSS {r['peak_rss_mb']:,.0f} MiB, batches {r['batches']}, "
              f"spilled {_mib(r['spilled_bytes'])}")
    for engine in ("pandas", "tws"):
        if "ordered" in results and engine in results:
            print(f"ordered / {BASELINE_NAMES[engine]} = "
                  f"{results['ordered']['records_per_s'] / results[engine]['records_per_s']:.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
