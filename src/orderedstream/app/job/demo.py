"""``orderedstream demo``: generate capture sessions, run the main job, verify, summarise.

With no endpoints given it starts a local Kafka broker, a local S3 (SeaweedFS) and local Spark.
The generator runs while the job runs (a late site's topic appears mid-run: topic discovery);
when the generator is done and the job has caught up, the query stops cleanly and the output
is verified against the topics alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from orderedstream.app.job.figures import FigureTracker
from orderedstream.app.job.generator import GeneratorOptions, GeneratorStats, generate
from orderedstream.app.job.monitor import JobMonitor, ProgressView, batch_rate
from orderedstream.app.job.pipeline import (
    JobOptions,
    finish_cleanup,
    start_job,
    wait_caught_up,
)
from orderedstream.app.job.verify import Verification, compare, expected_from_topics, read_topics


@dataclass
class DemoResult:
    """What a demo run gave: the generator's figures, the verification's verdict, the
    batches committed, the seconds it took and the output table's location."""

    generated: GeneratorStats
    verification: Verification
    batches: int
    seconds: float
    output: str


def verify_output(processor: Any, opts: JobOptions,
                  progress: Callable[[str], None] | None = None) -> Verification:
    """Compare the committed output with what the topics say (an independent reference model).

    Parameters
    ----------
    processor
        The job's processor, whose ``table()`` reads the committed output.
    opts
        The job's options (Kafka and the topic pattern).
    progress
        Gets a line every 10 seconds while the topics are read; None: nothing.

    Returns
    -------
    Verification
        The differences, if any, and the counts compared.

    Runs on
    -------
    driver"""
    changes, dead, final = expected_from_topics(
        read_topics(opts.bootstrap, opts.topic_pattern, progress=progress))
    table = processor.table().to_arrow()
    cols = ["kind", "topic", "partition", "offset", "session", "seq", "applied_seq", "op",
            "row", "values"]
    rows = table.select(cols).to_pylist()
    change_rows = [r for r in rows if r["kind"] == "change"]
    dead_rows = [r for r in rows if r["kind"] == "dead_letter"]
    final_rows = [{**r, "values": json.loads(r["values"])} for r in rows
                  if r["kind"] == "snapshot" and r["op"] == "final"]
    return compare(changes, dead, final, change_rows, dead_rows, final_rows)


def run_demo(spark: Any, bootstrap: str, storage_options: dict[str, Any], base_url: str,
             workdir: Path, gen: GeneratorOptions, create_topic: Callable[[str, int], None],
             out: Callable[[str], None] = print, max_offsets_per_trigger: int = 50_000, *,
             output: str | None = None, output_format: Literal["delta", "parquet"] = "delta",
             view: ProgressView | None = None, tracker: FigureTracker | None = None,
             ) -> DemoResult:
    """Generate, run the job until caught up, stop it, verify; returns the verdict.

    ``output`` (default ``<base_url>/output``) may be a local folder: the demo keeps its table
    on local disk so it can be read after the services stop; state stays under ``base_url``
    and the Spark checkpoint is ``<workdir>/checkpoint``. On a folder of a previous run the
    query continues from that checkpoint (``gen.session_tag`` keeps new sessions apart).

    Parameters
    ----------
    spark
        The Spark session.
    bootstrap
        Kafka bootstrap servers.
    storage_options
        The pack's storage options for ``base_url``.
    base_url
        Where state (and by default the output) goes.
    workdir
        The run's local folder (the checkpoint).
    gen
        What the generator produces, while the job runs.
    create_topic
        ``create_topic(name, partitions)`` for the generator.
    out
        Where the progress lines go.
    max_offsets_per_trigger
        Kafka records per batch at most.
    output
        The output table's location; None: ``<base_url>/output``.
    output_format
        ``JobOptions.output_format``: ``delta``, or ``parquet`` (fenced Parquet output).
    view, tracker
        The progress view and the figures' tracker; None: new ones.

    Returns
    -------
    DemoResult
        The run's figures and the verification's verdict.

    Raises
    ------
    BaseException
        The generator's failure, after the query was stopped; the query's own failure.

    Runs on
    -------
    driver"""
    opts = JobOptions(bootstrap=bootstrap, output=output or f"{base_url}/output",
                      state_location=f"{base_url}/state",
                      checkpoint=str(workdir / "checkpoint"),
                      topic_pattern=f"{gen.prefix}-.*", storage_options=storage_options,
                      max_offsets_per_trigger=max_offsets_per_trigger,
                      output_format=output_format)
    began = time.monotonic()
    stats_box: dict[str, GeneratorStats] = {}
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            stats_box["stats"] = generate(bootstrap, gen, create_topic=create_topic)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    # The first site's topic must exist before the query starts (the pattern must match).
    producer = threading.Thread(target=produce, name="generator", daemon=True)
    producer.start()
    while not stats_box and not errors:
        from confluent_kafka.admin import AdminClient

        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        if any(t.startswith(f"{gen.prefix}-") for t in topics):
            break
        time.sleep(0.2)
    tracker = tracker or FigureTracker()
    view = view or ProgressView("orderedstream demo", out=out, prefix="[demo]")
    view.print(f"[demo] generating sessions into {gen.prefix}-* while the job runs")
    view.phase("first plan: starting the query (Python workers for the Kafka source)")
    query, processor = start_job(spark, opts, on_batch=tracker.on_result)
    try:
        with JobMonitor(query, opts, view, tracker, lag_every=3.0):
            wait_caught_up(query, opts, done_producing=lambda: bool(stats_box or errors))
    finally:
        query.stop()
        finish_cleanup(processor, view.print)
    if errors:
        raise errors[0]
    view.update(_final_view(tracker, time.monotonic() - began), force=True)
    stats = stats_box["stats"]
    view.print(f"[demo] generated {stats.records} records ({stats.bad_records} bad on purpose) "
               f"in {stats.sessions} sessions over {len(stats.topics)} topics; verifying the "
               "output ...")
    verdict = verify_output(processor, opts, view.print)
    result = processor.last_result
    return DemoResult(stats, verdict, 0 if result is None else result.batch_id + 1,
                      time.monotonic() - began, opts.output)


def _final_view(tracker: FigureTracker, elapsed: float) -> dict[str, Any]:
    figures = tracker.figures
    return {"figures": figures, "lag": {}, "rate": batch_rate(figures), "elapsed": elapsed}
