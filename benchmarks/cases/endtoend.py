"""End to end: the main job vs the same pipeline written with Spark's built-ins.

Ours is ``orderedstream.app.job`` as shipped (``start_job``): ``orderedkafka`` ->
``OrderedStateful``
running ``SessionLogic`` (capture-session rebuild, job/sessions.py) -> fenced Parquet on S3,
state on S3. Spark's reads the same topics with ``format("kafka")`` (connector jars from Maven
Central), groups by the Kafka key with ``applyInPandasWithState`` (RocksDB state store provider)
running the very same ``SessionLogic`` through a ``GroupState`` adapter (each key's rows of a
batch sorted by offset first: the shuffle does not keep order) and writes
``writeStream.format("parquet")`` to the same S3 through s3a, partitioned the same way
(kind/site/date). Spark's checkpoint (offsets and its state store) is on local disk, ours on S3:
this favours Spark.

Both run with Trigger.AvailableNow and the same ``maxOffsetsPerTrigger`` over data produced
beforehand by the job's generator (4 topics x 2 partitions, 1% bad records), each engine in its
own process (own JVM). Reported: records/s (all records / wall time of the query), median and
p95 batch duration (query progress ``triggerExecution``), peak RSS of each engine's process tree.
Checked: both outputs verified against the topics (lost, duplicated, out of order, dead letters,
final tables: all must be 0) and compared row by row with each other.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.cases._streaming import (
    create_topic,
    engine_comparison,
    job_output_rows,
    kafka_connector_jars,
    run_engine,
    run_query,
    s3a,
    two_engine_session,
)
from benchmarks.common import CaseContext, Result, RssSampler

SNAPSHOT_EVERY = 100
IDLE_TIMEOUT = "10 minutes"
COMPARED = ("kind", "site", "date", "session", "seq", "applied_seq", "op", "row", "values",
            "topic", "partition", "offset", "reason")


class SparkGroupStateAdapter:
    """This pack's ``GroupState`` calls (as ``SessionLogic`` makes them) on Spark's pandas
    ``GroupState``: the value travels as one JSON string column (``value string``)."""

    def __init__(self, state: Any) -> None:
        self._state = state
        self._value = json.loads(state.get[0]) if state.exists else None
        self._timeout_ms: int | None = None

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def has_timed_out(self) -> bool:
        return bool(self._state.hasTimedOut)

    def get(self) -> Any:
        if self._value is None:
            raise KeyError("no state for this key")
        return self._value

    def get_option(self, default: Any = None) -> Any:
        return default if self._value is None else self._value

    def update(self, value: Any) -> None:
        self._value = value

    def remove(self) -> None:
        self._value = None

    def set_timeout_duration(self, duration: Any) -> None:
        from orderedstream.statestore.ordered.timeouts import parse_duration_ms

        self._timeout_ms = parse_duration_ms(duration, "timeout")

    def save(self) -> None:
        """Write the value (or its removal) and the timeout back to Spark's state."""
        if self._value is None:
            if self._state.exists:
                self._state.remove()
            return
        self._state.update((json.dumps(self._value, separators=(",", ":")),))
        if self._timeout_ms:
            self._state.setTimeoutDuration(self._timeout_ms)


def spark_sessions_func(key: Any, frames: Any, state: Any) -> Any:
    """``applyInPandasWithState`` function: ``SessionLogic`` over one key's rows of a batch,
    in offset order (sessions stay in one Kafka partition, so offset order is their order)."""
    import pandas as pd

    from orderedstream.app.job.sessions import OUTPUT_SCHEMA, SessionLogic

    logic = SessionLogic(SNAPSHOT_EVERY, IDLE_TIMEOUT)
    adapter = SparkGroupStateAdapter(state)
    rows: list[dict[str, Any]] = []
    if state.hasTimedOut:
        rows.extend(logic(key[0], None, adapter))
    else:
        frame = pd.concat(list(frames), ignore_index=True).sort_values(["partition", "offset"])
        for record in frame.to_dict("records"):
            rows.extend(logic(key[0], record, adapter))
    adapter.save()
    if rows:
        yield _frame(rows, OUTPUT_SCHEMA)


def _frame(rows: list[dict[str, Any]], schema: Any) -> Any:
    """Rows (dicts, missing fields null) as a pandas frame Spark converts to ``schema``."""
    import pandas as pd
    import pyarrow as pa

    table = pa.Table.from_pylist(rows, schema=schema)
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(),
                                         pa.int32(): pd.Int32Dtype()}.get)


def _output_ddl() -> str:
    return ("kind string, site string, date string, session string, seq long, "
            "applied_seq long, op string, row string, values string, topic string, "
            "partition int, offset long, event_time timestamp, reason string, "
            "raw_value binary")


def engine_main(engine: str, ctx: CaseContext, params: dict[str, Any]) -> dict[str, Any]:
    """One engine over the topics (runs in its own process, see ``_streaming.run_engine``)."""
    work = Path(params["work"])
    spark = two_engine_session("e2e", engine, ctx, params, params["shuffle_partitions"],
                               __name__)
    try:
        with RssSampler() as rss:
            if engine == "ours":
                figures = _run_ours(spark, ctx, params, work)
            else:
                figures = _run_spark(spark, ctx, params, work)
        figures["peak_rss_mb"] = rss.peak_mb
        return figures
    finally:
        spark.stop()


def _run_ours(spark: Any, ctx: CaseContext, params: dict[str, Any], work: Path,
              ) -> dict[str, Any]:
    from orderedstream.app.job.pipeline import JobOptions, start_job

    opts = JobOptions(bootstrap=ctx.bootstrap, output=params["ours_output"],
                      state_location=params["ours_state"], checkpoint=str(work / "cp-ours"),
                      topic_pattern=params["pattern"], storage_options=ctx.storage_options,
                      max_offsets_per_trigger=params["per_batch"],
                      snapshot_every=SNAPSHOT_EVERY, idle_timeout=IDLE_TIMEOUT,
                      query_name="bench-e2e")
    query, processor = start_job(spark, opts, once=True)
    return run_query(query, params["records"], processor=processor)


def _run_spark(spark: Any, ctx: CaseContext, params: dict[str, Any], work: Path,
               ) -> dict[str, Any]:
    from pyspark.sql.streaming.state import GroupStateTimeout

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", ctx.bootstrap)
           .option("subscribePattern", params["pattern"])
           .option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", str(params["per_batch"])).load())
    out = (raw.select("key", "value", "topic", "partition", "offset", "timestamp")
           .groupBy("key")
           .applyInPandasWithState(spark_sessions_func, _output_ddl(), "value string", "append",
                                   GroupStateTimeout.ProcessingTimeTimeout))
    query = (out.writeStream.format("parquet").partitionBy("kind", "site", "date")
             .option("path", s3a(params["spark_output"]))
             .option("checkpointLocation", str(work / "cp-spark"))
             .trigger(availableNow=True).start())
    figures = run_query(query, params["records"])
    # Committed rows only (through _spark_metadata), copied locally for the comparison.
    (spark.read.option("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
     .parquet(s3a(params["spark_output"])).select(*COMPARED)
     .write.parquet(str(work / "spark-rows")))
    return figures


def _spark_rows(work: Path) -> list[dict[str, Any]]:
    import pyarrow.dataset as ds

    return ds.dataset(str(work / "spark-rows"), format="parquet").to_table().to_pylist()


def _verify(rows: list[dict[str, Any]], reference: tuple[Any, Any, Any]) -> dict[str, Any]:
    from orderedstream.app.job.verify import compare

    changes, dead, final = reference
    final_rows = [{**r, "values": json.loads(r["values"])} for r in rows
                  if r["kind"] == "snapshot" and r["op"] == "final"]
    verdict = compare(changes, dead, final, [r for r in rows if r["kind"] == "change"],
                      [r for r in rows if r["kind"] == "dead_letter"], final_rows)
    return verdict.as_dict()


def _digest(rows: list[dict[str, Any]]) -> Counter:
    return Counter(tuple(str(r[c]) for c in COMPARED) for r in rows)


def run(ctx: CaseContext) -> list[Result]:
    """benchmarks.run case: generate sessions once, run both engines, verify, compare."""
    from orderedstream.app.job.generator import GeneratorOptions, generate
    from orderedstream.app.job.verify import expected_from_topics, read_topics

    records_wanted = ctx.scale.get("e2e_records", 200_000)
    topics, per_topic = 4, 2
    per_session = 52  # snapshot + 50 changes + end
    sessions = max(2, records_wanted // (topics * per_session))
    stamp = time.strftime("%H%M%S")
    prefix = f"bench-e2e-{stamp}"
    gen = GeneratorOptions(prefix=prefix, sites=topics - 1, late_sites=1, partitions=per_topic,
                           sessions_per_site=sessions, open_sessions=8, seed=11)
    stats = generate(ctx.bootstrap, gen,
                     create_topic=lambda t, p: create_topic(ctx.bootstrap, t, p))
    records = stats.records
    batches = ctx.scale.get("e2e_batches", 10)
    per_batch = max(1000, -(-records // batches))
    work = Path(tempfile.mkdtemp(prefix="endtoend-", dir=ctx.workdir))
    params: dict[str, Any] = {"work": str(work), "kafka_jars": kafka_connector_jars(),
                              "pattern": f"{prefix}-.*", "per_batch": per_batch,
                              "records": records,
                              "shuffle_partitions": topics * per_topic,
                              "ours_output": ctx.s3_url(prefix, "ours-output"),
                              "ours_state": ctx.s3_url(prefix, "ours-state"),
                              "spark_output": ctx.s3_url(prefix, "spark-output")}
    ours = run_engine(__name__, "ours", ctx, params, work)
    spark = run_engine(__name__, "spark", ctx, params, work)

    reference = expected_from_topics(read_topics(ctx.bootstrap, params["pattern"]))
    ours_rows = job_output_rows(params["ours_output"], ctx.storage_options, COMPARED)
    spark_rows = _spark_rows(work)
    ours_check, spark_check = _verify(ours_rows, reference), _verify(spark_rows, reference)
    a, b = _digest(ours_rows), _digest(spark_rows)
    differing = sum(((a - b) + (b - a)).values())
    agree = differing == 0 and ours_check["ok"] and spark_check["ok"]
    print(f"[endtoend] ours {ours['records_per_s']:,.0f} rec/s, spark "
          f"{spark['records_per_s']:,.0f} rec/s; outputs agree: {agree} "
          f"({len(ours_rows)} vs {len(spark_rows)} rows, {differing} differing)", flush=True)
    if ours["records"] != records or spark["records"] != records:
        raise RuntimeError(f"engines read {ours['records']} / {spark['records']} records, "
                           f"{records} were produced")

    base = "Spark built-ins (applyInPandasWithState)"
    how = ("Spark's: format('kafka') + groupBy(key).applyInPandasWithState (RocksDB) + "
           f"parquet sink; {records:,} capture-session records ({stats.bad_records} bad) in "
           f"{topics} topics x {per_topic} partitions, AvailableNow, maxOffsetsPerTrigger "
           f"{per_batch:,}, same SessionLogic, output to SeaweedFS S3, local[2], one engine "
           "per process")
    agreement = {"outputs_agree": agree, "rows_ours": len(ours_rows),
                 "rows_spark": len(spark_rows), "rows_differing": differing,
                 "ours_verification": {k: v for k, v in ours_check.items() if k != "examples"},
                 "spark_verification": {k: v for k, v in spark_check.items()
                                        if k != "examples"}}
    return engine_comparison("endtoend", ours, spark, base, how, agreement) + [
        Result("endtoend", "output rows differing", "rows", differing, None, None,
               f"outputs agree: {'YES' if agree else 'NO'}. Multiset difference of ours "
               f"({len(ours_rows):,} rows) vs Spark's ({len(spark_rows):,}) on "
               f"{', '.join(COMPARED)}; each output verified against the topics: ours "
               f"{'ok' if ours_check['ok'] else 'FAILED'}, Spark's "
               f"{'ok' if spark_check['ok'] else 'FAILED'} (lost, duplicated, out of order, "
               "dead letters, final tables)",
               higher_is_better=False, extra={"outputs_agree": agree}),
    ]
