"""Shared by the end-to-end, Yahoo and scaling cases: engine subprocesses, Spark sessions,
streaming-query figures.

Each engine (this pack's job, or the same job written with Spark's built-ins) runs in its own
Python process with its own Spark JVM, so its peak RSS (driver Python + JVM + Python workers,
sampled) is its own and neither engine inherits the other's warmed-up JVM heap. The case process
produces the data once, runs the engines one after the other on the same topics, and compares.
Not a case itself (the leading underscore keeps it out of ``benchmarks.run``'s list).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import CaseContext, Result, batch_durations_ms, percentile

ROOT = Path(__file__).resolve().parent.parent.parent


def run_engine(module: str, engine: str, ctx: CaseContext, params: dict[str, Any],
               workdir: Path, timeout: float = 1800.0, *,
               sample_tree: bool = False) -> dict[str, Any]:
    """Run ``<module>.engine_main(engine, ctx, params)`` in a fresh interpreter; its result.

    The child's output goes to ``<workdir>/<engine>.log``; a failure raises with the log's tail.
    ``sample_tree``: add the child's process tree's CPU and memory (``TreeSampler.figures``),
    sampled from this process so that the sampling is not the engine's own work; where a
    cgroup can be made, ``cpu_s`` is the kernel's exact total (``benchmarks.cases._cgroup``).
    """
    from benchmarks.cases._cgroup import engine_cgroup, with_exact_cpu
    from benchmarks.cases._tree import TreeSampler

    workdir.mkdir(parents=True, exist_ok=True)
    result = workdir / f"{engine}.result.json"
    log = workdir / f"{engine}.log"
    code = ("import json, sys; from benchmarks.common import CaseContext; "
            f"import {module} as m; a = json.loads(sys.stdin.read()); "
            "r = m.engine_main(a['engine'], CaseContext(**a['ctx']), a['params']); "
            "open(a['result'], 'w').write(json.dumps(r))")
    payload = json.dumps({"engine": engine, "ctx": json.loads(ctx.to_json()),
                          "params": params, "result": str(result)})
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    argv = [sys.executable, "-c", code]
    with open(log, "w") as out, engine_cgroup(sample_tree) as group:
        proc = subprocess.Popen(group.wrap(argv) if group else argv, stdin=subprocess.PIPE,
                                text=True, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=ROOT)
        sampler = TreeSampler(proc.pid) if sample_tree else contextlib.nullcontext(None)
        with sampler as tree:
            try:
                proc.communicate(payload, timeout=timeout)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        figures = with_exact_cpu(tree.figures(), group) if tree is not None else {}
    if proc.returncode != 0 or not result.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{module} engine {engine!r} failed (exit {proc.returncode}); "
                           f"log {log}:\n{tail}")
    return {**json.loads(result.read_text()), **figures}


def kafka_connector_jars() -> list[str]:
    """Spark's Kafka connector jars, resolved once in the case process for its engines.

    When pyspark's exact version is not on Maven Central, ``spark_kafka_connector_jars`` runs
    several failing ``mvn`` lookups (a minute or more on a busy 2-core machine) on every call
    before it falls back; a fallback already resolved into the cache is taken directly.
    """
    import pyspark

    from orderedstream.dev.services.jars import cache_root, spark_kafka_connector_jars

    major = pyspark.__version__.split(".")[0]
    exact = sorted(cache_root().glob(f"spark-sql-kafka-{pyspark.__version__}-tp*/.complete"))
    cached = exact or sorted(cache_root().glob(f"spark-sql-kafka-{major}.*-tp*/.complete"))
    if cached:
        return sorted(str(p) for p in cached[-1].parent.glob("*.jar"))
    return spark_kafka_connector_jars()


def spark_session(app: str, tmp_dir: Path, partitions: int,
                  kafka_jars: list[str] | None = None,
                  s3a_endpoint: str | None = None, master: str = "local[2]",
                  conf: dict[str, str] | None = None, java_options: str = "",
                  environment: dict[str, str] | None = None, fork_server: bool = False) -> Any:
    """A ``local[2]`` (or ``master``) session for an engine run (``java_options``: the driver
    JVM's extra options; ``fork_server`` as ``orderedstream run`` has it).

    ``kafka_jars`` adds Spark's own Kafka connector, ``s3a_endpoint`` hadoop-aws and
    S3A settings for SeaweedFS (anonymous uploads: SeaweedFS without identities refuses S3A's
    chunk-signed ones). Spark's stateful operators use the RocksDB state store provider and
    ``partitions`` shuffle partitions; every batch's progress is kept for batch durations.
    """
    from orderedstream.dev.services.spark import local_spark_session

    settings = {
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        **(conf or {}),
    }
    jars: list[str] = list(kafka_jars or [])
    if s3a_endpoint:
        from orderedstream.dev.services.jars import hadoop_aws_jars
        from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY
        from orderedstream.dev.services.spark import s3a_conf

        jars += hadoop_aws_jars()
        settings.update(s3a_conf(s3a_endpoint, ACCESS_KEY, SECRET_KEY))
        settings["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider")
    if jars:
        settings["spark.jars"] = ",".join(jars)
    return local_spark_session(app, master=master, conf=settings, tmp_dir=tmp_dir,
                               java_options=java_options, environment=environment,
                               fork_server=fork_server)


def two_engine_session(case: str, engine: str, ctx: CaseContext, params: dict[str, Any],
                       shuffle_partitions: int, module: str, main_job: bool = False) -> Any:
    """The session of one side of a this-pack-vs-Spark case, in that engine's own process:
    ``module``'s functions are pickled by value; Spark's side (``engine == "spark"``) also gets
    Spark's Kafka connector (``params["kafka_jars"]``) and S3A to the case's SeaweedFS.
    ``main_job``: the driver JVM options ``orderedstream run`` uses (``JOB_JAVA_OPTIONS`` and
    the JVM class archive when ``scripts/bootstrap.sh`` built it), its ``JOB_ENVIRONMENT`` and
    ``JOB_CONF``, and its driver process tuned as the embedded session tunes it
    (``orderedstream.dev.embedded_session.tune_this_process``)."""
    from pyspark import cloudpickle

    from orderedstream.dev.local.settings import JOB_CONF, JOB_ENVIRONMENT, JOB_JAVA_OPTIONS
    from orderedstream.dev.services import jvmarchive

    cloudpickle.register_pickle_by_value(sys.modules[module])
    spark_side = engine == "spark"
    if main_job:
        from orderedstream.dev.embedded_session import tune_this_process

        tune_this_process()
    # BENCH_EVENT_LOG=<folder>: Spark's event log of each engine (jobs, stages, tasks), to see
    # where a batch's time goes (stage and task durations per batch)
    events = os.environ.get("BENCH_EVENT_LOG")
    event_log = ({"spark.eventLog.enabled": "true", "spark.eventLog.dir": events,
                  "spark.eventLog.compress": "false"} if events else {})
    # BENCH_JAVA_OPTIONS="...": more options for the main job's driver JVM, e.g. a flight
    # recording (-XX:StartFlightRecording=filename=x.jfr,settings=profile) to see its CPU's code
    extra_java = os.environ.get("BENCH_JAVA_OPTIONS", "")
    return spark_session(f"bench-{case}-{engine}", Path(params["work"]) / f"spark-{engine}",
                         shuffle_partitions,
                         kafka_jars=params["kafka_jars"] if spark_side else None,
                         s3a_endpoint=ctx.s3_endpoint if spark_side else None,
                         conf={"spark.sql.session.timeZone": "UTC", **event_log,
                               **(JOB_CONF if main_job else {})},
                         java_options=(f"{JOB_JAVA_OPTIONS} {jvmarchive.java_options()} "
                                       f"{extra_java}".strip() if main_job else ""),
                         environment=JOB_ENVIRONMENT if main_job else None,
                         fork_server=main_job and not spark_side)


def s3a(url: str) -> str:
    """``s3://b/p`` -> ``s3a://b/p`` (Spark's own sinks write through hadoop-aws)."""
    return url.replace("s3://", "s3a://", 1)


def run_query(query: Any, expected_records: int | None = None, poll: float = 0.2,
              processor: Any = None) -> dict[str, Any]:
    """Wait for a streaming query; records, wall seconds, records/s, batch durations.

    With ``expected_records`` the query is stopped as soon as its completed batches have read
    that many records, and the time is taken then: Spark's ``applyInPandasWithState`` with
    processing-time timeouts keeps running no-data batches under Trigger.AvailableNow and never
    terminates on its own. The same rule is applied to every engine. ``processor``: an
    ``OrderedStateful`` fed with ``emit=ranges``, whose ``records_total`` counts the records
    (Spark's ``numInputRows`` then counts range rows).
    """

    def done() -> int:
        if processor is None:
            return sum(p.get("numInputRows", 0) for p in query.recentProgress)
        # Count a batch once Spark has finished it too (its progress is posted after
        # foreachBatch returns), so that stopping then keeps its figures. One progress per
        # look (lastProgress): recentProgress is every batch's, each a py4j call and a JSON
        # document, five times a second: by batch 12 about 60 calls a second of the
        # harness's own work in the engine's JVM and driver, sharing their two cores.
        result = processor.last_result
        if result is None:
            return int(processor.records_total)
        last = query.lastProgress
        finished = last is not None and int(last["batchId"]) >= result.batch_id
        return int(processor.records_total) if finished else 0

    started, started_wall = time.perf_counter(), time.time()
    seconds: float | None = None
    ended_wall = 0.0  # when the poll saw the batch done, or the query ended
    if expected_records is None:
        query.awaitTermination()
    else:
        while query.isActive:
            if done() >= expected_records:
                seconds = time.perf_counter() - started
                ended_wall = time.time()
                query.stop()
                break
            time.sleep(poll)
    if seconds is None:  # the query ended on its own (Trigger.AvailableNow: no more data)
        seconds = time.perf_counter() - started
        ended_wall = time.time()
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    progress = query.recentProgress
    durations = batch_durations_ms(progress)
    records = done()
    polled = seconds
    end: float | None = None
    if expected_records is not None:
        # The poll sees the last batch (or the query's own end) up to ``poll`` seconds after
        # it ended: the time is taken at that batch's end as Spark's progress gives it (its
        # trigger's start + triggerExecution), which the poll's own moment bounds.
        last = _last_needed_batch(progress, expected_records, processor)
        end = None if last is None else progress_end(last)
        if end is not None and started_wall < end <= ended_wall:
            seconds = end - started_wall
    return {"records": records, "seconds": seconds, "seconds_polled": polled,
            "wall": {"started": started_wall, "polled_end": ended_wall, "batch_end": end},
            "records_per_s": records / seconds if seconds else 0.0,
            "batches": len(durations), "batch_ms": durations}


def progress_start(progress: dict[str, Any]) -> float | None:
    """Wall-clock start (epoch seconds) of the trigger of one ``StreamingQueryProgress`` (as a
    dict): its ``timestamp``; None when missing."""
    from datetime import datetime

    stamp = progress.get("timestamp")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def progress_end(progress: dict[str, Any]) -> float | None:
    """Wall-clock end of the batch of one ``StreamingQueryProgress`` (as a dict): its trigger's
    ``timestamp`` plus ``durationMs.triggerExecution``; None when either is missing."""
    begun = progress_start(progress)
    took = (progress.get("durationMs") or {}).get("triggerExecution")
    return None if begun is None or took is None else begun + took / 1000


def _last_needed_batch(progress: list[dict[str, Any]], expected: int, processor: Any,
                       ) -> dict[str, Any] | None:
    """The progress of the batch that brought the query to ``expected`` records: with an
    ``OrderedStateful`` the batch of its last result, else the first whose running sum of
    ``numInputRows`` reaches ``expected``."""
    if processor is not None:
        result = processor.last_result
        wanted = None if result is None else int(result.batch_id)
        return next((p for p in progress if int(p["batchId"]) == wanted), None)
    total = 0
    for p in progress:
        total += int(p.get("numInputRows", 0))
        if total >= expected:
            return p
    return None


def summarize_batches(durations: list[float]) -> dict[str, float]:
    """Median and p95 of batch durations (ms); 0.0 when there was no data batch."""
    if not durations:
        return {"median_ms": 0.0, "p95_ms": 0.0}
    return {"median_ms": statistics.median(durations),
            "p95_ms": percentile(durations, 0.95) or 0.0}


def engine_comparison(case: str, ours: dict[str, Any], spark: dict[str, Any], baseline: str,
                      how: str, extra: dict[str, Any]) -> list[Result]:
    """The rows every two-engine streaming case reports from ``run_query``-style figures:
    records/s, median and p95 batch duration, and peak RSS of each engine's process tree."""
    ob, sb = summarize_batches(ours["batch_ms"]), summarize_batches(spark["batch_ms"])
    return [
        Result(case, "records/s", "records/s", ours["records_per_s"],
               spark["records_per_s"], baseline, how,
               extra={"ours_s": round(ours["seconds"], 1),
                      "spark_s": round(spark["seconds"], 1), **extra}),
        Result(case, "batch duration p50", "ms", ob["median_ms"], sb["median_ms"], baseline,
               f"median of per-batch triggerExecution over {ours['batches']} / "
               f"{spark['batches']} batches", higher_is_better=False),
        Result(case, "batch duration p95", "ms", ob["p95_ms"], sb["p95_ms"], baseline,
               "p95 of per-batch triggerExecution", higher_is_better=False),
        Result(case, "peak RSS", "MiB", ours["peak_rss_mb"], spark["peak_rss_mb"], baseline,
               "summed RSS of the engine's process tree (driver Python, JVM, Python workers), "
               "sampled every 0.5 s", higher_is_better=False),
    ]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions (replication 1)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def job_output_rows(url: str, storage_options: dict[str, Any],
                    columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """The main job's committed output rows at ``url`` (``columns`` only), whichever table
    format the job wrote (``JobOptions.output_format``: a Delta table by default, else fenced
    Parquet): each read the way its readers read it, committed files only."""
    from orderedstream.sinks.deltalog import DeltaOutput, table_format
    from orderedstream.sinks.table import FencedTable

    table = (DeltaOutput(url, storage_options) if table_format(url, storage_options) == "delta"
             else FencedTable(url, storage_options))
    return table.to_arrow().select(list(columns)).to_pylist()
