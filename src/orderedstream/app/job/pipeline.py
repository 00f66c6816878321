"""The main job: ``orderedkafka`` -> ordered per-session state -> fenced Parquet, with progress.

Driver side. ``start_job`` builds the streaming query; ``JobMonitor`` prints progress (records/s,
lag, batches committed, state partitions) and tells when the query has caught up with Kafka.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orderedstream.app.job.sessions import OUTPUT_SCHEMA, PARTITION_BY, SessionLogic
from orderedstream.statestore.ordered import OrderedStateful, ProcessingTimeTimeout

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """Where the job reads and writes, and how it batches.

    ``checkpoint`` is Spark's query checkpoint (a local or HDFS path: Spark's own metadata is
    only the offsets; the truth about output and state is the commit log under ``output``).
    """

    bootstrap: str
    output: str
    state_location: str
    checkpoint: str
    topic_pattern: str = "sessions-.*"
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    max_offsets_per_trigger: int | None = 100_000
    trigger: str = "2 seconds"
    snapshot_every: int = 100
    idle_timeout: str = "10 minutes"
    integrity: str = "strict"
    emit: str = "ranges"  # orderedkafka emit: ranges (tasks read Kafka themselves) or records
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    query_name: str = "sessions"


def make_processor(opts: JobOptions) -> Any:
    """The ``foreachBatch`` function: ordered state per session, one output table."""
    return OrderedStateful(
        SessionLogic(opts.snapshot_every, opts.idle_timeout),
        state_location=opts.state_location, output=opts.output, output_schema=OUTPUT_SCHEMA,
        key="key", timeout=ProcessingTimeTimeout(), storage_options=dict(opts.storage_options),
        writer_id=opts.query_name, writer_options={"partitionBy": list(PARTITION_BY)},
        columns=["key", "value", "topic", "partition", "offset", "timestamp"],
        checkpoint_location=opts.checkpoint, kafka_options=_kafka_options(opts))


def _kafka_options(opts: JobOptions) -> dict[str, str]:
    """``kafka.*`` options for the ordered tasks: with ``emit=ranges`` they read Kafka
    themselves and take the secret settings from here (the rows carry only their names)."""
    return {k if k.startswith("kafka.") else f"kafka.{k}": v
            for k, v in opts.kafka_options.items()}


def start_job(spark: Any, opts: JobOptions, once: bool = False) -> tuple[Any, Any]:
    """Start the query (``once``: Trigger.AvailableNow); returns (query, processor)."""
    reader = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", opts.bootstrap)
              .option("subscribePattern", opts.topic_pattern)
              .option("startingOffsets", "earliest")
              .option("integrity", opts.integrity)
              .option("emit", opts.emit))
    if opts.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
    for key, value in _kafka_options(opts).items():
        reader = reader.option(key, value)
    processor = make_processor(opts)
    writer = (reader.load().writeStream.queryName(opts.query_name)
              .foreachBatch(processor.process_batch)
              .option("checkpointLocation", opts.checkpoint))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(
        processingTime=opts.trigger)
    return writer.start(), processor


def kafka_end_offsets(bootstrap: str, pattern: str) -> dict[str, dict[int, int]]:
    """Topic -> partition -> high watermark, for topics matching ``pattern`` now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "orderedstream-lag",
                         "enable.auto.commit": False})
    try:
        out: dict[str, dict[int, int]] = {}
        for topic, md in consumer.list_topics(timeout=10).topics.items():
            if re.fullmatch(pattern, topic):
                out[topic] = {p: consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                                timeout=10)[1]
                              for p in md.partitions}
        return out
    finally:
        consumer.close()


def committed_offsets(query: Any) -> dict[str, dict[int, int]]:
    """Topic -> partition -> next offset as of the query's last completed batch."""
    import json

    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return {}
    end = progress["sources"][0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    offsets = (end or {}).get("offsets", {})
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()}


def lag(query: Any, bootstrap: str, pattern: str) -> int:
    """Records in Kafka that the query's committed batches have not covered yet."""
    done = committed_offsets(query)
    total = 0
    for topic, parts in kafka_end_offsets(bootstrap, pattern).items():
        for partition, high in parts.items():
            total += max(0, high - done.get(topic, {}).get(partition, 0))
    return total


class JobMonitor:
    """Prints one progress line every ``every`` seconds while the query runs."""

    def __init__(self, query: Any, processor: Any, opts: JobOptions,
                 out: Callable[[str], None] = print, every: float = 5.0) -> None:
        self.query, self.processor, self.opts, self.out, self.every = (
            query, processor, opts, out, every)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-monitor", daemon=True)
        self.records = 0
        self.started = time.monotonic()

    def __enter__(self) -> JobMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def line(self) -> str:
        progress = self.query.recentProgress
        # Records from the stage (with emit=ranges Spark's numInputRows counts range rows).
        self.records = self.processor.records_total
        last = progress[-1] if progress else {}
        result = getattr(self.processor, "last_result", None)
        took = last.get("durationMs", {}).get("triggerExecution") or 0
        rate = result.records / (took / 1000) if result is not None and took else 0.0
        batches = (result.batch_id + 1) if result is not None else 0
        states = len(self.processor.partition_states()) if result is not None else 0
        try:
            behind = lag(self.query, self.opts.bootstrap, self.opts.topic_pattern)
        except Exception as exc:  # noqa: BLE001 - progress must not kill the job
            behind = f"? ({exc})"
        return (f"[job] {time.monotonic() - self.started:6.0f}s  batches committed {batches}  "
                f"records {self.records}  {rate:,.0f} rec/s (last batch)  lag {behind}  "
                f"state partitions {states}")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if not self.query.isActive:
                return
            try:
                self.out(self.line())
            except Exception as exc:  # noqa: BLE001
                _log.debug("progress line failed: %s", exc)


def wait_caught_up(query: Any, opts: JobOptions, done_producing: Callable[[], bool],
                   timeout: float = 1800.0, poll: float = 2.0) -> None:
    """Block until the producer is done and the query's committed offsets reach Kafka's end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        if not query.isActive:
            raise RuntimeError("the job stopped before catching up with Kafka")
        if done_producing() and lag(query, opts.bootstrap, opts.topic_pattern) == 0:
            return
        time.sleep(poll)
    raise TimeoutError(f"the job did not catch up with Kafka within {timeout:.0f}s")
