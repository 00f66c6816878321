"""The main job: ``orderedkafka`` -> ordered per-session state -> Delta / fenced Parquet.

Driver side. ``start_job`` builds the streaming query; ``wait_caught_up`` tells when it has
caught up with Kafka (progress: ``orderedstream.app.job.monitor``).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orderedstream.app.job.figures import OBSERVED_NAME, observe_input
from orderedstream.app.job.sessions import OUTPUT_SCHEMA, PARTITION_BY, SessionLogic
from orderedstream.app.job.warmup import (
    STAGE_MODULES,
    planner_frame,
    warm_python_workers,
    warm_read_planner,
)
from orderedstream.core.errors import OptionError
from orderedstream.core.pandaslazy import keep_pandas_lazy
from orderedstream.core.sparkmode import default_parallelism, is_connect
from orderedstream.core.tuning import SessionTuning, session_tuning
from orderedstream.core.units import parse_duration_ms
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
    fetch_wait_max_ms: int = 50
    """librdkafka's ``fetch.wait.max.ms`` for the job's consumers unless ``kafka_options``
    sets it (librdkafka's default 500). A pooled consumer that has read up to the log end
    keeps a fetch waiting at the broker for this long, and a reader that re-assigns it (the
    reader's check of a range's early end, e.g. a trailing transaction marker) waits for that
    fetch first, which with the default delayed many ranges
    (docs/decisions/0007-replace-consumers-instead-of-seeking.md). A consumer pooled with a
    backlog after its range (catching up) asks the broker every this many ms once it has
    prefetched to the log end; near the log end a pooled consumer is unassigned and asks
    nothing (``python_datasource.consumer_pool``)."""
    state_snapshots: Literal["changelog", "checkpoint"] = "changelog"
    """How a batch saves each Kafka partition's state to ``state_location``: ``changelog``
    uploads the batch's writes as one log and a full RocksDB checkpoint every 10th version of
    the partition (a restore replays at most 9 logs; Spark's RocksDB changelog checkpointing);
    ``checkpoint`` uploads a checkpoint's new SST files every batch. Either reads state the
    other wrote. Why the job uses logs: docs/decisions/0018-changelog-snapshots.md."""
    query_name: str = "sessions"
    warm_workers: bool = True
    """Start the stage's Python workers (and their imports) while the query starts, in local
    mode (``orderedstream.app.job.warmup``); False: batch 0 starts them."""
    output_format: Literal["delta", "parquet"] = "delta"
    """``delta``: a Delta Lake table, one Delta commit per batch (any Delta reader sees exactly
    the committed rows); ``parquet``: the fenced Parquet table (``_fenced`` log)."""


def make_processor(opts: JobOptions) -> Any:
    """The job's ``OrderedStateful`` processor: ordered state per session, one output table.

    Parameters
    ----------
    opts
        The job's options (locations, storage options, output format, state snapshots).

    Runs on
    -------
    driver (its ordered stage runs on the executors)"""
    return OrderedStateful(
        SessionLogic(opts.snapshot_every, opts.idle_timeout),
        state_location=opts.state_location, output=opts.output, output_schema=OUTPUT_SCHEMA,
        key="key", timeout=ProcessingTimeTimeout(), storage_options=dict(opts.storage_options),
        writer_id=opts.query_name, writer_options={"partitionBy": list(PARTITION_BY)},
        columns=["key", "value", "topic", "partition", "offset", "timestamp"],
        checkpoint_location=opts.checkpoint, kafka_options=_kafka_options(opts),
        output_format=opts.output_format,
        store_options={"changelog": _changelog(opts.state_snapshots)})


def _changelog(mode: str) -> bool:
    if mode not in ("changelog", "checkpoint"):
        raise OptionError(f"state_snapshots={mode!r}: 'changelog' (a log of each batch's "
                          "writes, a full checkpoint every 10th version) or 'checkpoint' (a "
                          "RocksDB checkpoint every batch) is accepted")
    return mode == "changelog"


def _kafka_options(opts: JobOptions) -> dict[str, str]:
    """``kafka.*`` options for the ordered tasks: with ``emit=ranges`` they read Kafka
    themselves and take the secret settings from here (the rows carry only their names)."""
    return {k if k.startswith("kafka.") else f"kafka.{k}": v
            for k, v in opts.kafka_options.items()}


def start_job(spark: Any, opts: JobOptions, once: bool = False,
              on_batch: Callable[[Any, float], None] | None = None) -> tuple[Any, Any]:
    """Start the query (``once``: Trigger.AvailableNow); returns (query, processor).
    ``on_batch(result, seconds)`` is called after each batch (figures, metrics file).

    The ordered stage is part of the query's plan (``OrderedStateful.apply`` /
    ``commit_batch``), so Spark's progress carries its figures under
    ``observedMetrics["orderedstream"]``; only when batches are placed on a cluster
    (``placement="auto"``, the shim) does it run inside ``foreachBatch`` (``process_batch``),
    with the input's records and Kafka partitions observed instead (``observe_input``).

    The local machine's tuning (one pool of Python workers, the warm-up job, the release of
    the planner workers, the checkpoint file manager) comes only from the session's own tuning
    (``orderedstream.core.tuning.session_tuning``: the embedded local session's, with the
    process tuning on); without it the query is the same query, built with public PySpark API
    only. On a Spark Connect session the batch function (``commit_batch``) runs on the server,
    so ``on_batch`` is not called: the figures are in each batch's ``StreamingQueryProgress``.

    Parameters
    ----------
    spark
        The Spark session (classic or Spark Connect).
    opts
        The job's options.
    once
        ``Trigger.AvailableNow``: process what is in Kafka now, then stop.
    on_batch
        ``on_batch(result, seconds)`` after each batch; None: nothing.

    Returns
    -------
    tuple
        The ``StreamingQuery`` and the processor (``make_processor``).

    Raises
    ------
    Exception
        Spark's or the pack's error when the query cannot be defined or started.

    Runs on
    -------
    driver"""
    tuned = None if is_connect(spark) else session_tuning()  # the tuning needs the driver JVM
    keep_pandas_lazy()  # the driver's commit path builds Arrow arrays too (core.pandaslazy)
    reader = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", opts.bootstrap)
              .option("subscribePattern", opts.topic_pattern)
              .option("startingOffsets", "earliest")
              .option("integrity", opts.integrity)
              .option("emit", opts.emit))
    if opts.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
    kafka = _kafka_options(opts)
    kafka.setdefault("kafka.fetch.wait.max.ms", str(opts.fetch_wait_max_ms))
    for key, value in kafka.items():
        reader = reader.option(key, value)
    processor = make_processor(opts)
    placed = processor.placement.places(spark)  # per-batch placement: the foreachBatch stage
    shuffled = (tuned is not None and not placed and opts.emit == "ranges"
                and tuned.share_python_workers(spark))
    if shuffled:  # one task describes the batch's ranges (see below), not one per partition
        reader = reader.option("rangePartitions", "1")
    warm = shuffled and opts.warm_workers and os.environ.get("ORDEREDSTREAM_WARM_WORKERS") != "0"
    # what batch 0 would start, started now (warmup; the variable: for A/B measurements): the
    # workers' job is submitted while the source is planned, and is queued before start()
    workers = warm_python_workers(spark, (*STAGE_MODULES, type(processor.func).__module__),
                                  queued_within=None) if warm else None
    frame = reader.load()
    # a read Spark plans ahead, so that batch 0 finds its read planner started (warmup)
    planner = planner_frame(spark) if warm else None
    # load() ran Spark's lookup and create planner steps: their idle pools go (record 0010)
    # now, before the query starts its source runner and the stage's workers, not at batch 0
    _release_planners(spark, tuned)
    if placed:
        frame, commit = observe_input(frame), processor.process_batch
    else:  # the stage in the query's plan: its figures reach StreamingQueryProgress
        if shuffled:
            # One worker pool (local mode): the source's range rows cross one tiny shuffle, so
            # the source's read and the stage run in separate tasks, each with one Python
            # worker, instead of two workers side by side in every stage task. The rows come
            # from ONE source task (rangePartitions): a Spark task per Kafka partition only
            # to describe its range cost a Python task round trip each, every batch
            # (docs/decisions/0002-emit-ranges.md).
            frame = frame.repartition(default_parallelism(spark))
        frame, commit = processor.apply(frame, name=OBSERVED_NAME), processor.commit_batch
    if planner is not None:
        warm_read_planner(planner)
    if workers is not None:
        workers.wait_queued()
    writer = (frame.writeStream.queryName(opts.query_name)
              .foreachBatch(commit if is_connect(spark)  # runs on the Connect server
                            else _batch_function(spark, commit, on_batch, tuned))
              .option("checkpointLocation", opts.checkpoint))
    # Spark's interval parser takes "2 seconds" but not "500ms", which the pack's does: give
    # Spark the interval the pack parsed.
    writer = writer.trigger(availableNow=True) if once else writer.trigger(
        processingTime=f"{parse_duration_ms(opts.trigger, '--trigger')} milliseconds")
    if tuned is None:
        return writer.start(), processor
    return tuned.start_query(spark, writer, opts.checkpoint), processor


CLEANUP_WAIT_S = 30.0
"""How long a stopped query waits for the state cleanup running beside its last batches."""


def finish_cleanup(processor: Any, say: Callable[[str], None]) -> None:
    """Let the state cleanup started by the last due batch end once the query stopped (a clean
    stop; after a restart, no cleanup of the old run beside the new one's unless it outlives
    the wait: concurrent cleanups are safe, see ``statestore.ordered.retention``); one still
    running after ``CLEANUP_WAIT_S`` is left to its daemon thread.

    Parameters
    ----------
    processor
        The stopped query's processor.
    say
        Gets a line when the cleanup outlives the wait."""
    try:
        processor.wait_for_cleanup(CLEANUP_WAIT_S)
    except TimeoutError:
        say(f"[job] the state cleanup still runs after {CLEANUP_WAIT_S:.0f}s; the next one "
            "finishes what it leaves")


def _batch_function(spark: Any, process: Callable[[Any, int], Any],
                    on_batch: Callable[[Any, float], None] | None,
                    tuned: SessionTuning | None = None) -> Callable[[Any, int], Any]:
    """The ``foreachBatch`` function: with the session's tuning, first the idle Python pools of
    Spark's planner runs are stopped (``release_planner_workers``: the query planned its source
    when it started, each planner module otherwise idle for the whole run, see
    docs/decisions/0010-planner-worker-release.md; a no-op once they are gone), before the
    batch's tasks start the stage's workers; then the batch, then ``on_batch``."""

    def process_batch(batch_df: Any, batch_id: int) -> Any:
        if tuned is not None:
            tuned.batch_started()
            _release_planners(spark, tuned)
        began = time.monotonic()
        result = process(batch_df, batch_id)
        if on_batch is not None:
            on_batch(result, time.monotonic() - began)
        return result

    return process_batch


def _release_planners(spark: Any, tuned: SessionTuning | None) -> None:
    if tuned is None:
        return
    released = tuned.release_planner_workers(spark)
    if released:
        _log.info("stopped the idle Python workers of Spark's planner runs: %s",
                  ", ".join(sorted(released)))


def kafka_end_offsets(bootstrap: str, pattern: str) -> dict[str, dict[int, int]]:
    """Topic -> partition -> high watermark, for topics matching ``pattern`` now.

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers.
    pattern
        The topics' regular expression.

    Raises
    ------
    KafkaException
        Kafka did not answer a metadata or watermark request within its wait."""
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
    """Topic -> partition -> next offset as of the query's last completed batch.

    Parameters
    ----------
    query
        The ``StreamingQuery``; {} before its first progress report."""
    import json

    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return {}
    end = progress["sources"][0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    offsets = (end or {}).get("offsets", {})
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()}


def checkpoint_offsets(checkpoint: str) -> dict[str, dict[int, int]]:
    """Topic -> partition -> next offset as of the last batch committed in a local Spark
    checkpoint ({} when there is none): the lag of a restarted query before its first
    progress report.

    Parameters
    ----------
    checkpoint
        The checkpoint's local path or ``file://`` URL."""
    import json
    from pathlib import Path

    root = Path(checkpoint.removeprefix("file://"))
    try:
        ids = [int(p.name) for p in (root / "commits").iterdir() if p.name.isdigit()]
        lines = (root / "offsets" / str(max(ids))).read_text().splitlines()
        offsets = json.loads(lines[2]).get("offsets", {})
    except (OSError, ValueError, IndexError, AttributeError):
        return {}
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()}


def lag_per_topic(query: Any, bootstrap: str, pattern: str,
                  checkpoint: str | None = None) -> dict[str, int]:
    """Topic -> records in Kafka that the query's committed batches have not covered yet.

    Parameters
    ----------
    query
        The ``StreamingQuery``.
    bootstrap, pattern
        As ``kafka_end_offsets``.
    checkpoint
        Before the query's first progress, the lag is taken as of this local checkpoint's
        last commit; None: from Kafka's start.

    Raises
    ------
    KafkaException
        As ``kafka_end_offsets``."""
    done = committed_offsets(query)
    if not done and checkpoint and "://" not in checkpoint.removeprefix("file://"):
        done = checkpoint_offsets(checkpoint)
    return {topic: sum(max(0, high - done.get(topic, {}).get(partition, 0))
                       for partition, high in parts.items())
            for topic, parts in kafka_end_offsets(bootstrap, pattern).items()}


def lag(query: Any, bootstrap: str, pattern: str) -> int:
    """Records in Kafka that the query's committed batches have not covered yet.

    Parameters
    ----------
    query, bootstrap, pattern
        As ``lag_per_topic``."""
    return sum(lag_per_topic(query, bootstrap, pattern).values())


def wait_caught_up(query: Any, opts: JobOptions, done_producing: Callable[[], bool],
                   timeout: float = 1800.0, poll: float = 2.0) -> None:
    """Block until the producer is done and the query's committed offsets reach Kafka's end.

    Parameters
    ----------
    query
        The running ``StreamingQuery``.
    opts
        The job's options (Kafka and the topic pattern).
    done_producing
        True once the producer has sent everything.
    timeout
        Seconds to wait at most.
    poll
        Seconds between checks.

    Raises
    ------
    Exception
        The query's own failure (``query.exception()``).
    RuntimeError
        The query stopped before catching up.
    TimeoutError
        It did not catch up within ``timeout``."""
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
