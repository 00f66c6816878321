"""Peer: the main job vs the same job written with Quix Streams, on the same input.

Ours is ``orderedstream.app.job`` as shipped (``start_job``, Trigger.AvailableNow, local[2]):
``orderedkafka`` with ``emit=ranges`` -> ``OrderedStateful`` running ``SessionLogic`` -> fenced
Parquet on S3, state (RocksDB) on S3. Quix Streams (PyPI ``quixstreams``, pinned, installed in
its own virtualenv under ``~/.cache/orderedstream/quix-venv`` on first use) runs the very same
``SessionLogic`` in one process (``benchmarks/quix_app.py``): exactly-once (Kafka
transactions), RocksDB state with changelog topics, Parquet files on local disk. Quix writes
locally and keeps no remote state copy: this favours Quix.

Input: the job's generator, 4 topics x 2 partitions, 1% bad records, produced once. Each engine
runs in its own process tree, sampled from the case's process (``benchmarks.cases._tree``)
every 0.25 s with psutil for CPU seconds (user + system of every process of the tree) and peak
summed RSS, every second for PSS. Reported: records/s, records/s per core (ours uses 2 cores,
Quix one), records per CPU-second (the cost view, independent of how many cores were busy),
CPU seconds, peak RSS, ours' time from process start to the first committed batch. Checked:
the two outputs compared row by row on every compared column (must be equal). Also measured,
each in its own process: the user function alone (the floor the pack's overhead is counted
above) and Spark's own fixed cost of a one-batch run (the main job's session, one two-task
Python job, stop), which bounds from below what any pack on Spark can reach at this size.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.cases._cgroup import engine_cgroup, with_exact_cpu
from benchmarks.cases._streaming import (
    ROOT,
    create_topic,
    job_output_rows,
    progress_end,
    progress_start,
    run_engine,
    run_query,
    two_engine_session,
)
from benchmarks.cases._tree import TreeSampler
from benchmarks.common import CaseContext, Result

QUIX_VERSION = "3.28.1"
QUIX_VENV = Path.home() / ".cache" / "orderedstream" / "quix-venv"
QUIX_EXTRA = ("pyarrow==26.0.1",)  # Quix's Parquet format needs it; same version as ours
QUIX_CONSTRAINTS = ROOT / "benchmarks" / "quix-constraints.txt"
"""Every package of Quix's venv pinned (its dependencies are not, by quixstreams): the peer is
the same Quix on every machine and day."""
SNAPSHOT_EVERY = 100
IDLE_TIMEOUT = "10 minutes"
OUR_CORES, QUIX_CORES = 2, 1
OVERHEAD_TARGET_US = 25.0
TUNING_ENV = "ORDEREDSTREAM_PROCESS_TUNING"  # orderedstream.core.tuning.ENV, not imported here
SESSION_ENV = "BENCH_SESSION"
"""``embedded`` (the default: the main job in the embedded session's tuning), ``plain`` (in
the plain session of ``orderedstream run --master local[2]``) or ``both`` (each in its own
process, one after the other, over the same input: the peer's ratio for each, and what the
tuning is worth); ``benchmarks.run --session`` sets it."""
SESSIONS = {"embedded": ("ours",), "plain": ("plain",), "both": ("ours", "plain")}
COMPARED = ("kind", "site", "date", "session", "seq", "applied_seq", "op", "row", "values",
            "topic", "partition", "offset", "reason")


def quix_python() -> Path:
    """Quix Streams' own virtualenv, every package pinned by ``QUIX_CONSTRAINTS`` (created
    once; the marker names the version and the constraints' digest, so a change of either
    installs again)."""
    digest = hashlib.sha256(QUIX_CONSTRAINTS.read_bytes()).hexdigest()[:12]
    marker = QUIX_VENV / f".quixstreams-{QUIX_VERSION}-{digest}"
    python = QUIX_VENV / "bin" / "python"
    if not marker.exists():
        print(f"[peer] installing quixstreams=={QUIX_VERSION} into {QUIX_VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(QUIX_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(QUIX_CONSTRAINTS),
                        f"quixstreams=={QUIX_VERSION}", *QUIX_EXTRA], check=True)
        marker.write_text(QUIX_VERSION)
    return python


# ---- ours, in its own process (benchmarks.cases._streaming.run_engine) ------------------------
def engine_main(engine: str, ctx: CaseContext, params: dict[str, Any]) -> dict[str, Any]:
    """``engine`` in this process: ``ours`` (the main job over the topics in the embedded
    session's tuning), ``plain`` (the same job in the plain session ``orderedstream run
    --master local[2]`` starts: Spark's defaults, the process tuning off) or ``floor`` (Spark's
    own floor, which must not import the pack's job)."""
    if engine == "floor":
        return _spark_floor(ctx, params)
    if engine == "plain":
        os.environ.pop(TUNING_ENV, None)  # before the pack's first use: nothing tuned
    from orderedstream.app.job.pipeline import JobOptions, start_job

    born = params["process_started"]
    work = Path(params["work"])
    if engine == "plain":
        from orderedstream.app.run_cli import plain_session

        spark = plain_session("bench-peer-plain", f"local[{OUR_CORES}]")
    else:
        spark = two_engine_session("peer", engine, ctx, params, 8, __name__, main_job=True)
    try:
        opts = JobOptions(bootstrap=ctx.bootstrap, output=params[f"{engine}_output"],
                          state_location=params[f"{engine}_state"],
                          checkpoint=str(work / f"cp-{engine}"), topic_pattern=params["pattern"],
                          storage_options=ctx.storage_options,
                          max_offsets_per_trigger=params["per_batch"],
                          snapshot_every=SNAPSHOT_EVERY, idle_timeout=IDLE_TIMEOUT,
                          query_name="bench-peer")
        started = time.time()
        query, processor = start_job(spark, opts, once=True)
        figures = run_query(query, params["records"], processor=processor)
        first = query.recentProgress[0] if query.recentProgress else {}
    finally:
        spark.stop()
    figures["timeline"] = batch_timeline(processor, first, started)
    end = progress_end(first) if first else None
    if end is not None:
        figures["first_commit_s"] = end - born
    return figures


def _spark_floor(ctx: CaseContext, params: dict[str, Any]) -> dict[str, Any]:
    """Spark's own fixed cost of a one-batch run, which no pack on Spark can go below: the main
    job's session (its JVM options, class archive, settings, fork server), one Spark job of two
    Python ``mapInArrow`` tasks (a Python worker started in each of the two task slots) over
    eight rows, and the session's stop. No Kafka, no state, no output."""
    spark = two_engine_session("peer", "floor", ctx, params, 8, __name__, main_job=True)
    try:
        rows = spark.range(0, 8, 1, 2).mapInArrow(_identity_batches, "id long").collect()
    finally:
        spark.stop()
    return {"rows": len(rows)}


def _identity_batches(batches: Any) -> Any:
    yield from batches


def batch_timeline(processor: Any, progress: dict[str, Any], started: float
                   ) -> dict[str, Any]:
    """Where the one batch's time went, in seconds from ``start_job``: Spark's phases of the
    trigger, and each Kafka partition's task (worker pid, start, open / records / state
    commit), read back from the batch's commit record after the run."""
    from orderedstream.statestore.ordered.plan import EXTRA_KEY

    out: dict[str, Any] = {"phases_ms": dict(progress.get("durationMs") or {})}
    begun = progress_start(progress)
    if begun is not None:
        out["trigger_start_s"] = round(begun - started, 3)
    record = processor.log.get(0) if processor is not None else None
    tasks = (record.extra or {}).get(EXTRA_KEY, {}).get("tasks", {}) if record else {}
    out["partitions"] = {
        pid: {"pid": t["metrics"].get("pid"), "records": t["records"],
              "start_s": round(t["metrics"].get("started_at", started) - started, 3),
              **{k: t["metrics"][k] for k in ("open_s", "process_s", "commit_s")}}
        for pid, t in sorted(tasks.items(), key=lambda kv: kv[1]["metrics"].get("started_at", 0))}
    return out


def _run_quix(ctx: CaseContext, params: dict[str, Any], work: Path) -> dict[str, Any]:
    python = quix_python()
    spec = {"bootstrap": ctx.bootstrap, "group": f"peer-quix-{time.time_ns()}",
            "topics": params["topics"], "records": params["records"],
            # Quix's file sink takes a folder name without "/" or "-": relative to its cwd.
            "state_dir": str(work / "quix-state"), "output_dir": "quix_output",
            "snapshot_every": SNAPSHOT_EVERY, "idle_timeout": IDLE_TIMEOUT, "idle_s": 5.0,
            "result": str(work / "quix.result.json")}
    (work / "quix.params.json").write_text(json.dumps(spec))
    argv = [str(python), str(ROOT / "benchmarks" / "quix_app.py"), str(work / "quix.params.json")]
    with open(work / "quix.log", "w") as log, engine_cgroup() as group:
        proc = subprocess.Popen(group.wrap(argv) if group else argv, stdout=log,
                                stderr=subprocess.STDOUT, cwd=work)
        with TreeSampler(proc.pid) as tree:
            code = proc.wait(timeout=1800)
        figures = with_exact_cpu(tree.figures(), group)
    if code != 0 or not Path(spec["result"]).exists():
        tail = "\n".join((work / "quix.log").read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"the Quix Streams app failed (exit {code}):\n{tail}")
    result = json.loads(Path(spec["result"]).read_text())
    seconds = result["seconds"]
    return {**result, "records_per_s": result["records"] / seconds, **figures}


def _user_floor(ctx: CaseContext, params: dict[str, Any], work: Path, per_topic: int
                ) -> dict[str, Any]:
    """The user function alone over the same records (``benchmarks.cases._user_floor``, its
    own process), measured in this run: the floor the pack's overhead is counted above."""
    spec = {"bootstrap": ctx.bootstrap, "snapshot_every": SNAPSHOT_EVERY,
            "idle_timeout": IDLE_TIMEOUT,
            "partitions": [[t, p] for t in params["topics"] for p in range(per_topic)]}
    (work / "floor.params.json").write_text(json.dumps(spec))
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.cases._user_floor",
                               str(work / "floor.params.json")], cwd=ROOT, capture_output=True,
                              text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"the user-function floor did not end in 900 s:\n"
                           f"{(exc.stderr or b'')[-1500:]!r}") from exc
    if done.returncode != 0:
        raise RuntimeError(f"the user-function floor failed (exit {done.returncode}):\n"
                           f"{done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _quix_rows(work: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted((work / "quix_output").rglob("*.parquet")):
        table = pq.read_table(path)
        rows.extend(table.select([c for c in COMPARED if c in table.column_names]).to_pylist())
    return rows


def _digest(rows: list[dict[str, Any]]) -> Counter:
    return Counter(tuple(str(r.get(c)) for c in COMPARED) for r in rows)


def run(ctx: CaseContext) -> list[Result]:
    """benchmarks.run case: generate sessions once, run both engines, compare outputs."""
    from orderedstream.app.job.generator import GeneratorOptions, generate

    wanted = ctx.scale.get("peer_records") or 2 * ctx.scale.get("e2e_records", 100_000)
    topics, per_topic, per_session = 4, 2, 52
    prefix = f"bench-peer-{time.strftime('%H%M%S')}"
    gen = GeneratorOptions(prefix=prefix, sites=topics - 1, late_sites=1, partitions=per_topic,
                           sessions_per_site=max(2, wanted // (topics * per_session)),
                           open_sessions=8, seed=11)
    stats = generate(ctx.bootstrap, gen,
                     create_topic=lambda t, p: create_topic(ctx.bootstrap, t, p))
    records = stats.records
    work = Path(tempfile.mkdtemp(prefix="peer-", dir=ctx.workdir))
    engines = SESSIONS.get(os.environ.get(SESSION_ENV, "embedded"))
    if engines is None:
        raise RuntimeError(f"{SESSION_ENV}={os.environ[SESSION_ENV]!r}: one of "
                           f"{', '.join(SESSIONS)} is accepted")
    params: dict[str, Any] = {"work": str(work), "kafka_jars": [], "pattern": f"{prefix}-.*",
                              "topics": stats.topics, "per_batch": None, "records": records,
                              **{f"{e}_{what}": ctx.s3_url(prefix, f"{e}-{what}")
                                 for e in engines for what in ("output", "state")}}
    ran: dict[str, dict[str, Any]] = {}
    for engine in engines:
        params["process_started"] = time.time()
        ran[engine] = run_engine(__name__, engine, ctx, params, work, sample_tree=True)
    quix = _run_quix(ctx, params, work)
    floor = _user_floor(ctx, params, work, per_topic)
    spark_floor = run_engine(__name__, "floor", ctx, params, work, sample_tree=True)
    if quix["records"] != records or floor["records"] != records:
        raise RuntimeError(f"Quix read {quix['records']} records (the user function alone "
                           f"{floor['records']}), {records} were produced")
    quix_rows = _quix_rows(work)
    results: list[Result] = []
    for engine, ours in ran.items():
        ours_rows = job_output_rows(params[f"{engine}_output"], ctx.storage_options, COMPARED)
        results += _results(engine, ours, quix, floor, spark_floor, records, ours_rows,
                            quix_rows, f"{records:,} capture-session records "
                            f"({stats.bad_records} bad) in {topics} topics x {per_topic} "
                            "partitions, same SessionLogic")
    if len(ran) == 2:
        tuned, plain = ran["ours"], ran["plain"]
        results += [
            Result("peer", "tuning: embedded vs plain session, records/s", "records/s",
                   tuned["records_per_s"], plain["records_per_s"], "plain session",
                   "the same job and input in the embedded session (its JVM options, class "
                   "archive, JOB_CONF, fork server, process tuning on) vs the plain session "
                   "of 'orderedstream run --master local[2]' (Spark's defaults, tuning off)"),
            Result("peer", "tuning: embedded vs plain session, CPU seconds", "s",
                   tuned["cpu_s"], plain["cpu_s"], "plain session",
                   "user + system CPU of each engine's whole process tree",
                   higher_is_better=False),
            Result("peer", "tuning: embedded vs plain session, peak RSS", "MiB",
                   tuned["peak_rss_mb"], plain["peak_rss_mb"], "plain session",
                   "peak summed RSS of each engine's process tree", higher_is_better=False)]
    return results


def _results(engine: str, ours: dict[str, Any], quix: dict[str, Any], floor: dict[str, Any],
             spark_floor: dict[str, Any], records: int, ours_rows: list[dict[str, Any]],
             quix_rows: list[dict[str, Any]], input_text: str) -> list[Result]:
    """The peer's figures of one side of ours (``ours``: the embedded session, case ``peer``;
    ``plain``: the plain session, case ``peer-plain``)."""
    case = "peer" if engine == "ours" else "peer-plain"
    session = ("the embedded session" if engine == "ours" else
               "the plain session of 'orderedstream run --master local[2]', tuning off")
    if ours["records"] != records:
        raise RuntimeError(f"{case}: the job read {ours['records']} records, {records} were "
                           "produced")
    floor_us = floor["cpu_s"] * 1e6 / records
    ours_us, quix_us = ours["cpu_s"] * 1e6 / records, quix["cpu_s"] * 1e6 / records
    spark_floor_us = spark_floor["cpu_s"] * 1e6 / records
    if floor["output_rows"] != len(ours_rows):  # the floor ran other logic or other records
        raise RuntimeError(f"the user function alone gave {floor['output_rows']} rows, the job "
                           f"{len(ours_rows)}")
    a, b = _digest(ours_rows), _digest(quix_rows)
    differing = sum(((a - b) + (b - a)).values())
    print(f"[{case}] ours {ours['records_per_s']:,.0f} rec/s ({ours['cpu_s']:.1f} CPU-s), quix "
          f"{quix['records_per_s']:,.0f} rec/s ({quix['cpu_s']:.1f} CPU-s); {len(ours_rows)} vs "
          f"{len(quix_rows)} rows, {differing} differing", flush=True)
    base = f"Quix Streams {QUIX_VERSION}"
    how = (f"{input_text}. Ours: orderedstream main job in {session} "
           "(start_job, emit=ranges, one AvailableNow batch, local[2], state and output on "
           "SeaweedFS S3); Quix: one process, exactly-once, RocksDB state + changelog topics, "
           "Parquet on local disk. Time: ours from start_job's return to its batch's end as "
           "Spark's progress gives it (trigger start + triggerExecution), Quix from app.run "
           "to its return less its idle timeout. CPU: each engine's whole process tree, from "
           "its own cgroup where the machine allows one, else psutil every 0.25 s; RSS: psutil "
           "every 0.25 s")
    extra = {"ours_s": round(ours["seconds"], 2), "quix_s": round(quix["seconds"], 2),
             "ours_s_polled": round(ours.get("seconds_polled", ours["seconds"]), 2),
             "ours_cpu_s": round(ours["cpu_s"], 1), "quix_cpu_s": round(quix["cpu_s"], 1),
             "rows_ours": len(ours_rows), "rows_quix": len(quix_rows),
             "rows_differing": differing}
    return [
        Result(case, "records/s", "records/s", ours["records_per_s"], quix["records_per_s"],
               base, how, extra={**extra, "timeline": ours.get("timeline")}),
        Result(case, "records/s per core", "records/s/core",
               ours["records_per_s"] / OUR_CORES, quix["records_per_s"] / QUIX_CORES, base,
               f"records/s divided by the cores each engine was given (ours local[{OUR_CORES}], "
               f"Quix one process, {QUIX_CORES} core); target >= 1.5x", extra=extra),
        Result(case, "records per CPU-second", "records/CPU-s", records / ours["cpu_s"],
               records / quix["cpu_s"], base,
               "records / (user + system CPU seconds of the engine's whole process tree)"),
        Result(case, "CPU seconds", "s", ours["cpu_s"], quix["cpu_s"], base,
               "user + system CPU of the whole process tree (ours: driver Python, JVM, Python "
               "workers; Quix: its process), from the engine's own cgroup where the machine "
               "allows one (every process counted, however short-lived), else from the samples",
               higher_is_better=False,
               extra={"source": ours["cpu_source"],
                      "ours_sampled_s": round(ours["cpu_s_sampled"], 2),
                      "quix_sampled_s": round(quix["cpu_s_sampled"], 2),
                      "ours_by_process": ours["cpu_by_kind"],
                      "ours_jvm_by_thread": ours["jvm_cpu_by_thread"]}),
        Result(case, "pack overhead per record", "us",
               ours_us - floor_us, OVERHEAD_TARGET_US,
               f"target ({OVERHEAD_TARGET_US:.0f} us)",
               "whole run: (CPU seconds of ours' whole tree - CPU seconds of the user function "
               "alone over the same records) / records. The user function alone: SessionLogic "
               "per record in offset order, state in a dict, no store or output, measured in "
               "this run in its own process (benchmarks/cases/_user_floor.py). Includes the "
               "JVM's and workers' start and every fixed cost of the one batch",
               higher_is_better=False,
               extra={"user_function_us": round(floor_us, 2),
                      "ours_us": round(ours_us, 2), "quix_us": round(quix_us, 2),
                      "quix_overhead_us": round(quix_us - floor_us, 2),
                      "user_function_rows": floor["output_rows"]}),
        Result(case, "Spark's own floor per record", "us", spark_floor_us,
               OVERHEAD_TARGET_US, f"target ({OVERHEAD_TARGET_US:.0f} us)",
               "CPU seconds of Spark alone, over this run's records: the main job's session "
               "(same JVM options, class archive, settings, fork server), one job of two "
               "Python mapInArrow tasks over 8 rows, stop; no Kafka, state or output "
               "(peer.py _spark_floor), in its own cgroup. A one-batch run on Spark pays at "
               "least this above the user function; 'pack above the floor' is the rest",
               higher_is_better=False,
               extra={"floor_cpu_s": round(spark_floor["cpu_s"], 2),
                      "floor_by_process": spark_floor.get("cpu_by_kind"),
                      "floor_jvm_by_thread": spark_floor.get("jvm_cpu_by_thread"),
                      "pack_above_floor_us": round(ours_us - floor_us - spark_floor_us, 2),
                      "cpu_source": spark_floor.get("cpu_source")}),
        Result(case, "peak RSS", "MiB", ours["peak_rss_mb"], quix["peak_rss_mb"], base,
               "peak summed RSS of the process tree; target <= 1024 MiB",
               higher_is_better=False, extra={"ours_at_peak": ours["peak_rss_parts"]}),
        Result(case, "peak PSS", "MiB", ours["peak_pss_mb"], quix["peak_pss_mb"], base,
               "peak summed PSS of the process tree (pages shared by forked workers counted "
               "once); the target above is RSS", higher_is_better=False),
        Result(case, "start to first committed batch", "s", ours.get("first_commit_s", 0.0),
               None, None, "ours: from the engine process's start (Spark session, workers, "
               "first plan) to the end of batch 0's trigger (here the whole input)",
               higher_is_better=False),
        Result(case, "output rows differing", "rows", differing, None, None,
               f"multiset difference of ours ({len(ours_rows):,} rows) vs Quix's "
               f"({len(quix_rows):,}) on {', '.join(COMPARED)}; must be 0",
               higher_is_better=False, extra={"outputs_agree": differing == 0}),
    ]
