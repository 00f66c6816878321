"""Yahoo streaming benchmark style: views per campaign in 10 s event-time windows, both ways.

Data: ad events as JSON (user_id, page_id, ad_id, ad_type, event_type, event_time, ip) in one
topic, round-robin over its partitions; event time rises with the offset over 5 minutes (ending
5 minutes before the run) with up to 1 s of disorder, and the Kafka record timestamp is set to
the event time. 1,000 ads in 100 campaigns (the static table). After the events, one closing
``view`` per partition 60 s later moves both watermarks past every window; its own window stays
open in both engines and is not compared. (It must be a view: Spark pushes the ``event_type``
filter below ``withWatermark``, so other events never move Spark's watermark.)

- Ours: ``orderedkafka`` -> ``OrderedStateful`` with one state per Kafka partition
  (``key=None``): the open windows' counts per campaign; each record is parsed, filtered
  (``view``), joined (``ad_id`` -> ``campaign_id`` from the table shipped in the function) and
  counted; an ``EventTimeTimeout`` (watermark = the partition's max Kafka timestamp - 5 s) fires
  once the earliest open window's end passes, and the call emits the closed windows. Output:
  per-partition partial counts (partition, window_start ms, campaign_id, views) in fenced
  Parquet on S3 (readers sum over partitions; no shuffle anywhere).
- Spark's: ``format("kafka")`` + ``from_json`` + ``withWatermark("5 seconds")`` + filter +
  broadcast join + ``groupBy(window(10 s), campaign_id).count()`` + ``format("parquet")`` in
  append mode on S3 (s3a), RocksDB state store provider, checkpoint on local disk.

Both: Trigger.AvailableNow, same ``maxOffsetsPerTrigger``, each engine in its own process.
Checked: every (window, campaign) count of each engine equals the count computed while
producing, so the two agree with each other.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.cases._streaming import (
    create_topic,
    engine_comparison,
    kafka_connector_jars,
    run_engine,
    run_query,
    s3a,
    two_engine_session,
)
from benchmarks.common import CaseContext, Result, RssSampler

WINDOW_MS = 10_000
DELAY = "5 seconds"
CAMPAIGNS = 100
ADS_PER_CAMPAIGN = 10
EVENT_TYPES = ("view", "click", "purchase")
AD_TYPES = ("banner", "modal", "sponsored-search", "mail", "mobile")
SPAN_MS = 300_000  # event time covered by the events: 30 windows
DISORDER_MS = 1_000


def ad_campaigns() -> dict[str, str]:
    """The static table: ad_id -> campaign_id."""
    return {f"ad-{i:05d}": f"campaign-{i // ADS_PER_CAMPAIGN:03d}"
            for i in range(CAMPAIGNS * ADS_PER_CAMPAIGN)}


def produce(bootstrap: str, topic: str, events: int, partitions: int,
            seed: int = 5) -> Counter:
    """Write the ad events and the closing views; return the expected view counts per
    (window start ms, campaign_id)."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    rng = random.Random(seed)
    # Event time ends 5 minutes before now, starting on a window boundary: Kafka keeps records
    # by their timestamp (retention deletes old ones, newer than 1 h ahead are refused).
    t0 = (int(time.time() * 1000) - SPAN_MS - 300_000) // WINDOW_MS * WINDOW_MS
    table = ad_campaigns()
    ads = sorted(table)
    expected: Counter = Counter()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000, "compression.type": "lz4"})

    def send(partition: int, doc: dict[str, Any]) -> None:
        value = json.dumps(doc, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(topic, value=value, partition=partition,
                                 timestamp=doc["event_time"])
                return
            except BufferError:
                producer.poll(0.05)

    for i in range(events):
        event_time = t0 + DISORDER_MS + i * SPAN_MS // events - rng.randrange(DISORDER_MS)
        ad = ads[rng.randrange(len(ads))]
        kind = EVENT_TYPES[rng.randrange(3)]
        send(i % partitions, {
            "user_id": f"u-{rng.randrange(1 << 30):08x}",
            "page_id": f"p-{rng.randrange(1 << 20):05x}",
            "ad_id": ad, "ad_type": AD_TYPES[rng.randrange(len(AD_TYPES))],
            "event_type": kind, "event_time": event_time,
            "ip": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}"})
        if kind == "view":
            expected[(event_time - event_time % WINDOW_MS, table[ad])] += 1
    closing = t0 + SPAN_MS + 2 * DISORDER_MS + 60_000
    for p in range(partitions):
        send(p, {"user_id": "u-close", "page_id": "p-close", "ad_id": ads[0],
                 "ad_type": "banner", "event_type": "view", "event_time": closing,
                 "ip": "10.0.0.1"})
    if producer.flush(300):
        raise RuntimeError("benchmark data was not fully delivered")
    return expected


def count_views(key: Any, record: dict[str, Any] | None, state: Any) -> list[tuple]:
    """Ours, per record of one Kafka partition (``key`` is None: one state per partition).

    State: {"partition": p, "windows": {window_start_ms: {campaign_id: views}}, "late": n}.
    """
    value = state.get_option(None) or {"partition": None, "windows": {}, "late": 0}
    windows = value["windows"]
    watermark = state.get_current_watermark_ms()
    rows: list[tuple] = []
    if record is None:  # the watermark passed the earliest open window's end
        for start in sorted(s for s in windows if s + WINDOW_MS <= watermark):
            for campaign, views in sorted(windows.pop(start).items()):
                rows.append((value["partition"], start, campaign, views))
    else:
        value["partition"] = record["partition"]
        doc = json.loads(record["value"])
        if doc["event_type"] == "view":
            campaign = AD_CAMPAIGNS.get(doc["ad_id"])
            if campaign is not None:  # inner join
                start = doc["event_time"] - doc["event_time"] % WINDOW_MS
                if watermark >= 0 and start + WINDOW_MS <= watermark:
                    value["late"] += 1  # its window was emitted already: dropped, as Spark does
                else:
                    counts = windows.setdefault(start, {})
                    counts[campaign] = counts.get(campaign, 0) + 1
    state.update(value)
    if windows:
        state.set_timeout_timestamp(max(min(windows) + WINDOW_MS, watermark))
    return rows


AD_CAMPAIGNS = ad_campaigns()


def engine_main(engine: str, ctx: CaseContext, params: dict[str, Any]) -> dict[str, Any]:
    """One engine over the topic (own process, see ``_streaming.run_engine``)."""
    work = Path(params["work"])
    spark = two_engine_session("yahoo", engine, ctx, params, params["partitions"], __name__)
    try:
        with RssSampler() as rss:
            run = _run_ours if engine == "ours" else _run_spark
            figures, counts = run(spark, ctx, params, work)
        figures["peak_rss_mb"] = rss.peak_mb
        figures["counts"] = counts
        return figures
    finally:
        spark.stop()


def _run_ours(spark: Any, ctx: CaseContext, params: dict[str, Any], work: Path,
              ) -> tuple[dict[str, Any], list[list[Any]]]:
    import pyarrow as pa

    from orderedstream.statestore.ordered import EventTimeTimeout, OrderedStateful

    schema = pa.schema([("partition", pa.int32()), ("window_start", pa.int64()),
                        ("campaign_id", pa.string()), ("views", pa.int64())])
    checkpoint = str(work / "cp-ours")
    processor = OrderedStateful(
        count_views, state_location=params["ours_state"], output=params["ours_output"],
        output_schema=schema, key=None, columns=["value", "partition"],
        timeout=EventTimeTimeout(DELAY, column="timestamp"),
        storage_options=ctx.storage_options, writer_id="bench-yahoo",
        checkpoint_location=checkpoint)
    query = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", ctx.bootstrap).option("subscribe", params["topic"])
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(params["per_batch"])).load()
             .writeStream.foreachBatch(processor.process_batch)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    figures = run_query(query)
    table = processor.table().to_arrow()
    totals: Counter = Counter()
    for row in table.to_pylist():
        totals[(row["window_start"], row["campaign_id"])] += row["views"]
    figures["output_rows"] = table.num_rows
    late = 0
    for pid in processor.partition_states():
        topic, _, number = pid.rpartition("/")
        for _key, value in processor.read_state(topic, int(number)):
            late += value["late"]
    figures["late_dropped"] = late
    return figures, [[w, c, n] for (w, c), n in sorted(totals.items())]


def _run_spark(spark: Any, ctx: CaseContext, params: dict[str, Any], work: Path,
               ) -> tuple[dict[str, Any], list[list[Any]]]:
    from pyspark.sql import functions as F

    campaigns = spark.createDataFrame(sorted(ad_campaigns().items()), "ad_id string, "
                                      "campaign_id string")
    schema = ("user_id string, page_id string, ad_id string, ad_type string, "
              "event_type string, event_time long, ip string")
    counts = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", ctx.bootstrap)
              .option("subscribe", params["topic"]).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(params["per_batch"])).load()
              .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
              .select("e.*")
              .withColumn("event_ts", F.expr("timestamp_millis(event_time)"))
              .withWatermark("event_ts", DELAY)
              .where(F.col("event_type") == "view")
              .join(F.broadcast(campaigns), "ad_id")
              .groupBy(F.window("event_ts", f"{WINDOW_MS // 1000} seconds"), "campaign_id")
              .count()
              .select(F.expr("unix_millis(window.start)").alias("window_start"),
                      "campaign_id", F.col("count").alias("views")))
    query = (counts.writeStream.format("parquet").outputMode("append")
             .option("path", s3a(params["spark_output"]))
             .option("checkpointLocation", str(work / "cp-spark"))
             .trigger(availableNow=True).start())
    figures = run_query(query)
    rows = spark.read.parquet(s3a(params["spark_output"])).collect()
    figures["output_rows"] = len(rows)
    totals: Counter = Counter()
    for row in rows:
        totals[(row["window_start"], row["campaign_id"])] += row["views"]
    return figures, [[w, c, n] for (w, c), n in sorted(totals.items())]


def _differences(expected: Counter, got: list[list[Any]]) -> int:
    actual = Counter({(w, c): n for w, c, n in got})
    return sum(((expected - actual) + (actual - expected)).values())


def run(ctx: CaseContext) -> list[Result]:
    """benchmarks.run case: produce once, run both engines, compare the window counts."""
    events = ctx.scale.get("yahoo_events", 1_000_000)
    partitions = ctx.scale["partitions"]
    topic = f"bench-yahoo-{time.strftime('%H%M%S')}"
    expected = produce(ctx.bootstrap, topic, events, partitions)
    records = events + partitions
    per_batch = max(1000, -(-records // ctx.scale.get("yahoo_batches", 10)))
    work = Path(tempfile.mkdtemp(prefix="yahoo-", dir=ctx.workdir))
    params: dict[str, Any] = {"work": str(work), "kafka_jars": kafka_connector_jars(),
                              "topic": topic, "per_batch": per_batch, "records": records,
                              "partitions": partitions,
                              "ours_output": ctx.s3_url(topic, "ours-output"),
                              "ours_state": ctx.s3_url(topic, "ours-state"),
                              "spark_output": ctx.s3_url(topic, "spark-output")}
    ours = run_engine(__name__, "ours", ctx, params, work)
    spark = run_engine(__name__, "spark", ctx, params, work)
    ours_wrong = _differences(expected, ours["counts"])
    spark_wrong = _differences(expected, spark["counts"])
    between = _differences(Counter({(w, c): n for w, c, n in spark["counts"]}), ours["counts"])
    agree = ours_wrong == 0 and spark_wrong == 0 and between == 0
    print(f"[yahoo] ours {ours['records_per_s']:,.0f} rec/s, spark "
          f"{spark['records_per_s']:,.0f} rec/s; window counts agree: {agree} "
          f"(off from expected: ours {ours_wrong}, spark {spark_wrong})", flush=True)
    for name, figures in (("ours", ours), ("spark", spark)):
        if figures["records"] != records:
            raise RuntimeError(f"{name} read {figures['records']} records, {records} were "
                               "produced")

    base = "Spark built-ins (window count)"
    how = ("Spark's: format('kafka') + from_json + withWatermark + filter + broadcast join + "
           "groupBy(window, campaign).count() + parquet (append); "
           f"{events:,} JSON ad events (1/3 views) + {partitions} closing views over "
           f"{partitions} partitions, {len(expected):,} (10 s window, campaign) counts, "
           f"AvailableNow, maxOffsetsPerTrigger {per_batch:,}, output to SeaweedFS S3, "
           "local[2], one engine per process")
    check = {"window_counts_agree": agree, "windows_expected": len(expected),
             "ours_off_from_expected": ours_wrong, "spark_off_from_expected": spark_wrong,
             "ours_vs_spark_differing": between, "ours_output_rows": ours["output_rows"],
             "spark_output_rows": spark["output_rows"], "ours_late_dropped": ours["late_dropped"]}
    return engine_comparison("yahoo", ours, spark, base, how, check) + [
        Result("yahoo", "window counts off", "counts", between, None, None,
               f"window counts agree: {'YES' if agree else 'NO'}. Views differing between "
               "ours (summed over partitions) and Spark's per (window, campaign) over "
               f"{len(expected):,} windows x campaigns; off from the counts computed while "
               f"producing: ours {ours_wrong}, Spark's {spark_wrong} (all must be 0)",
               higher_is_better=False, extra=check),
    ]
