"""Small batches: the main job's fixed cost per batch, 12 Kafka partitions x about 100 records.

The main job as shipped (``start_job``: ``orderedkafka`` with ``emit=ranges`` ->
``OrderedStateful`` running ``SessionLogic`` -> fenced Parquet), state and output on S3
(SeaweedFS), ``local[2]``, Trigger.AvailableNow with ``maxOffsetsPerTrigger`` 1,200 over
capture sessions in 4 topics x 3 partitions: every batch reads about 100 records per partition.

Reported: the median and p95 batch duration (Spark's ``triggerExecution``) of the warm batches
(all but the first, which starts the Python workers), against the project's target of 500 ms;
the time from the engine process's start to the first committed batch (target 8 s); and where a
warm batch's time goes: Spark's phases (``durationMs``: offsets, planning, ``addBatch`` = the
``foreachBatch`` call) and, per task, the ordered stage's own metrics (state open, records,
state commit). Peak RSS of the engine's process tree.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cases._streaming import (
    create_topic,
    progress_end,
    run_engine,
    run_query,
    two_engine_session,
)
from benchmarks.common import CaseContext, Result, percentile

PER_BATCH = 1_200
TARGET_MS = 500.0
STARTUP_TARGET_S = 8.0
PHASES = ("latestOffset", "queryPlanning", "getBatch", "walCommit", "addBatch", "commitOffsets")


def engine_main(engine: str, ctx: CaseContext, params: dict[str, Any]) -> dict[str, Any]:
    from orderedstream.app.job.pipeline import JobOptions, start_job
    from orderedstream.statestore.ordered.plan import EXTRA_KEY

    work = Path(params["work"])
    spark = two_engine_session("smallbatch", engine, ctx, params, 12, __name__, main_job=True)
    try:
        opts = JobOptions(bootstrap=ctx.bootstrap, output=params["output"],
                          state_location=params["state"], checkpoint=str(work / "cp"),
                          topic_pattern=params["pattern"], storage_options=ctx.storage_options,
                          max_offsets_per_trigger=PER_BATCH, query_name="bench-small")
        query, processor = start_job(spark, opts, once=True)
        figures = run_query(query, params["records"], processor=processor)
        progress = [p for p in query.recentProgress if p.get("numInputRows")]
    finally:
        spark.stop()
    # The tasks' own figures, read back from the commit log once the job is over: this
    # harness's reading is not the job's memory or CPU.
    tasks: list[dict[str, Any]] = []
    for batch in range(1, len(progress)):
        record = processor.log.get(batch)
        if record is not None:
            tasks.extend(record.extra[EXTRA_KEY]["tasks"].values())
    end = progress_end(progress[0])
    if end is None:
        raise RuntimeError(f"batch 0's progress has no timestamp or duration: {progress[0]}")
    figures["first_commit_s"] = end - params["process_started"]
    figures["phases_ms"] = {k: statistics.median(p["durationMs"].get(k, 0) for p in progress[1:])
                            for k in PHASES} if len(progress) > 1 else {}
    figures["task_ms"] = {k: 1000 * statistics.median(t["metrics"][k] for t in tasks)
                          for k in ("head_read_s", "open_s", "process_s", "commit_s")
                          if all(k in t["metrics"] for t in tasks)} if tasks else {}
    figures["records_per_task"] = (statistics.median(t["records"] for t in tasks)
                                   if tasks else 0)
    # Warm tasks whose partition was still open in their worker (StateStoreOptions.keep_open)
    figures["kept_open_share"] = (sum(bool(t["metrics"].get("restore", {}).get("kept_open"))
                                      for t in tasks) / len(tasks)) if tasks else 0.0
    # A task's open by whether its worker kept the partition open (else: asks the keeper to
    # close it, then opens RocksDB): what a miss costs.
    opens: dict[str, list[float]] = {"kept": [], "not kept": []}
    for t in tasks:
        if "open_s" in t["metrics"]:
            kept = t["metrics"].get("restore", {}).get("kept_open")
            opens["kept" if kept else "not kept"].append(t["metrics"]["open_s"])
    figures["open_ms_by_kept"] = {label: round(1000 * statistics.median(group), 1)
                                  for label, group in opens.items() if group}
    return figures


def run(ctx: CaseContext) -> list[Result]:
    """benchmarks.run case: produce sessions, run the job in small batches, report."""
    from orderedstream.app.job.generator import GeneratorOptions, generate

    batches = ctx.scale.get("small_batches") or (4 if ctx.size == "tiny" else 12)
    sites, per_topic = 4, 3
    prefix = f"bench-small-{time.strftime('%H%M%S')}"
    gen = GeneratorOptions(prefix=prefix, sites=sites, late_sites=0, partitions=per_topic,
                           sessions_per_site=max(2, batches * PER_BATCH // (sites * 52)),
                           open_sessions=8, seed=5)
    stats = generate(ctx.bootstrap, gen,
                     create_topic=lambda t, p: create_topic(ctx.bootstrap, t, p))
    work = Path(tempfile.mkdtemp(prefix="smallbatch-", dir=ctx.workdir))
    params = {"work": str(work), "kafka_jars": [], "pattern": f"{prefix}-.*",
              "records": stats.records, "process_started": time.time(),
              "output": ctx.s3_url(prefix, "output"), "state": ctx.s3_url(prefix, "state")}
    ours = run_engine(__name__, "ours", ctx, params, work, sample_tree=True)
    warm = ours["batch_ms"][1:]
    if not warm:
        raise RuntimeError(f"only {len(ours['batch_ms'])} batch(es) ran; need 2 or more")
    median, p95 = statistics.median(warm), percentile(warm, 0.95) or 0.0
    how = (f"{stats.records:,} capture-session records in {sites} topics x {per_topic} "
           f"partitions, maxOffsetsPerTrigger {PER_BATCH} (about "
           f"{ours['records_per_task']:.0f} records per partition and batch), "
           f"{len(warm)} warm batches (batch 0, which starts the workers, left out); "
           "main job (emit=ranges), state and output on SeaweedFS S3, local[2]")
    detail = {"phases_ms (median, warm)": ours["phases_ms"],
              "cpu_s_by_process (whole run)": ours["cpu_by_kind"],
              "jvm_cpu_s_by_thread (whole run)": ours["jvm_cpu_by_thread"],
              "task_ms (median per task, warm)": {k: round(v, 1)
                                                  for k, v in ours["task_ms"].items()},
              "tasks reusing a partition kept open (warm)": round(ours["kept_open_share"], 2),
              "task open ms by kept (median, warm)": ours["open_ms_by_kept"],
              "batch_ms": ours["batch_ms"]}
    target = f"target ({TARGET_MS:.0f} ms)"
    return [
        Result("smallbatch", "batch duration p50", "ms", median, TARGET_MS, target, how,
               higher_is_better=False, extra=detail),
        Result("smallbatch", "batch duration p95", "ms", p95, TARGET_MS, target,
               "p95 of the warm batches' triggerExecution", higher_is_better=False),
        Result("smallbatch", "start to first committed batch", "s", ours["first_commit_s"],
               STARTUP_TARGET_S, f"target ({STARTUP_TARGET_S:.0f} s)",
               "from the engine process's start (interpreter, Spark session, workers, first "
               "plan) to the end of batch 0", higher_is_better=False),
        Result("smallbatch", "peak RSS", "MiB", ours["peak_rss_mb"], 1024.0,
               "target (1024 MiB)", "peak summed RSS of the engine's process tree",
               higher_is_better=False, extra={"at_peak": ours["peak_rss_parts"]}),
        Result("smallbatch", "peak PSS", "MiB", ours["peak_pss_mb"], None, None,
               "peak summed PSS of the engine's process tree (pages shared by forked workers "
               "counted once); the target above is RSS", higher_is_better=False),
    ]
