"""The ordered stage's figures per batch (driver side), for the progress view, Prometheus and
Spark's own ``StreamingQueryProgress``.

``FigureTracker.on_batch`` is called after every ``foreachBatch`` call with the processor's
``BatchResult``: records, output rows and files, state keys and bytes, restores, the tasks'
state commit time and the batch's wall time. ``prometheus_text`` renders them in Prometheus'
text exposition format; ``write_metrics_file`` replaces a file atomically (a scraper such as
node_exporter's textfile collector never reads half a file).

What reaches ``StreamingQueryProgress``: the main job puts the ordered stage into the query's
plan (``OrderedStateful.apply``, ``orderedstream.statestore.ordered.inplan``), so every batch's
progress (``query.lastProgress``, listener events) carries ``observedMetrics["orderedstream"]``
with the stage's own figures: ``records``, ``output_rows``, ``output_files``, ``state_keys``
and ``state_bytes`` (totals over every Kafka partition's state after the batch, as this
tracker's), ``restores``, ``bytes_downloaded``, ``timeouts``, ``state_commit_ms`` (the slowest
task's state commit) and ``kafka_partitions``. They come from the same per-partition task
results (``PartitionCommit``) that :class:`FigureTracker` adds up from each ``BatchResult``, so
the metrics file and the live view agree with Spark's progress; the tracker also counts what
the observation cannot: timeouts of idle partitions (a separate small job), skipped replays,
restarts. When batches are placed on a cluster the stage runs inside ``foreachBatch``
(``process_batch``) and :func:`observe_input` observes only the input's records and Kafka
partitions.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

OBSERVED_NAME = "orderedstream"


@dataclass(frozen=True)
class Figures:
    """Totals since this run started, plus the last batch's figures."""

    batches: int = 0
    last_batch_id: int | None = None
    records: int = 0
    output_rows: int = 0
    output_files: int = 0
    state_keys: int = 0
    state_bytes: int = 0
    restores: int = 0
    skipped_batches: int = 0
    last_records: int = 0
    last_output_rows: int = 0
    last_output_files: int = 0
    last_batch_ms: float = 0.0
    last_state_commit_ms: float = 0.0
    restarts: int = 0
    updated: float = field(default_factory=time.time)


class FigureTracker:
    """Accumulates :class:`Figures` from each batch's result (thread-safe reads)."""

    def __init__(self, metrics_file: Path | None = None, labels: Mapping[str, str] | None = None,
                 ) -> None:
        self.metrics_file = None if metrics_file is None else Path(metrics_file)
        self.labels = dict(labels or {})
        self._lock = threading.Lock()
        self._figures = Figures()
        self._state_bytes: dict[str, int] = {}

    @property
    def figures(self) -> Figures:
        """The figures so far (an immutable snapshot)."""
        with self._lock:
            return self._figures

    def restarted(self) -> None:
        """Count one query restart; the metrics file, if any, is rewritten."""
        with self._lock:
            self._figures = replace(self._figures, restarts=self._figures.restarts + 1)
        self._write()

    def on_batch(self, result: Any, seconds: float, state_keys: int | None = None) -> Figures:
        """Add one ``BatchResult``; the metrics file, if any, is rewritten.

        Parameters
        ----------
        result
            The batch's ``BatchResult`` (its commits, batch id, skipped flag).
        seconds
            The ``foreachBatch`` call's wall time.
        state_keys
            State keys over every partition after the batch; None: unchanged.

        Returns
        -------
        Figures
            The figures with the batch.

        Raises
        ------
        OSError
            The metrics file cannot be written."""
        commits = tuple(getattr(result, "commits", ()) or ())
        records = sum(int(c.records) for c in commits)
        rows = sum(int(c.output_rows) for c in commits)
        files = sum(len(c.files) for c in commits)
        commit_ms = max((float(c.metrics.get("commit_s") or 0.0) * 1000 for c in commits),
                        default=0.0)
        restores = sum(1 for c in commits if c.metrics.get("restored"))
        with self._lock:
            for c in commits:
                state = c.metrics.get("state") or {}
                if "bytes_total" in state:
                    self._state_bytes[c.partition_id] = int(state["bytes_total"])
            old = self._figures
            self._figures = replace(
                old, batches=old.batches + 1, last_batch_id=int(result.batch_id),
                records=old.records + records, output_rows=old.output_rows + rows,
                output_files=old.output_files + files,
                state_keys=old.state_keys if state_keys is None else state_keys,
                state_bytes=sum(self._state_bytes.values()), restores=old.restores + restores,
                skipped_batches=old.skipped_batches + int(bool(result.skipped)),
                last_records=records, last_output_rows=rows, last_output_files=files,
                last_batch_ms=seconds * 1000, last_state_commit_ms=commit_ms,
                updated=time.time())
            figures = self._figures
        self._write()
        return figures

    def on_progress(self, progress: Mapping[str, Any], name: str = "orderedstream") -> bool:
        """Add one batch from its ``StreamingQueryProgress`` (its ``observedMetrics[name]``,
        the in-plan stage's figures): what a Spark Connect run has instead of ``on_batch``,
        whose ``foreachBatch`` runs on the server.

        Parameters
        ----------
        progress
            One ``StreamingQueryProgress`` as a mapping.
        name
            The observation's name.

        Returns
        -------
        bool
            False when the progress has no figures (nothing added).

        Raises
        ------
        OSError
            The metrics file cannot be written."""
        row = observed_metrics(progress, name)
        if row is None:
            return False
        durations = progress.get("durationMs") or {}
        with self._lock:
            old = self._figures
            records, rows = int(row.get("records") or 0), int(row.get("output_rows") or 0)
            files = int(row.get("output_files") or 0)
            self._figures = replace(
                old, batches=old.batches + 1, last_batch_id=int(progress["batchId"]),
                records=old.records + records, output_rows=old.output_rows + rows,
                output_files=old.output_files + files,
                state_keys=int(row.get("state_keys") or old.state_keys),
                state_bytes=int(row.get("state_bytes") or old.state_bytes),
                restores=old.restores + int(row.get("restores") or 0),
                last_records=records, last_output_rows=rows, last_output_files=files,
                last_batch_ms=float(durations.get("addBatch") or 0.0),
                last_state_commit_ms=float(row.get("state_commit_ms") or 0.0),
                updated=time.time())
        self._write()
        return True

    def on_result(self, result: Any, seconds: float) -> None:
        """``on_batch`` of ``start_job``: :meth:`on_batch` with the state totals after it.

        Parameters
        ----------
        result
            The batch's ``BatchResult``.
        seconds
            The ``foreachBatch`` call's wall time.

        Raises
        ------
        OSError
            The metrics file cannot be written."""
        totals = state_totals_of(result)
        if totals is not None and totals[1] is not None:
            with self._lock:  # every partition's committed size is known: use those
                self._state_bytes = dict(totals[1])
        self.on_batch(result, seconds, state_keys=None if totals is None else totals[0])

    def _write(self) -> None:
        if self.metrics_file is not None:
            write_metrics_file(self.metrics_file, prometheus_text(self.figures, self.labels))


def observed_metrics(progress: Mapping[str, Any], name: str = "orderedstream",
                     ) -> dict[str, Any] | None:
    """``progress.observedMetrics[name]`` as a dict, or None. A classic session's progress
    holds a ``Row``; a Spark Connect client's holds the JSON form, ``{"values": [...],
    "schema": {"fields": [...]}}``.

    Parameters
    ----------
    progress
        One ``StreamingQueryProgress`` as a mapping.
    name
        The observation's name."""
    observed = (progress.get("observedMetrics") or {}).get(name)
    if observed is None:
        return None
    row = observed.asDict() if hasattr(observed, "asDict") else dict(observed)
    if set(row) == {"values", "schema"}:
        names = [f["name"] for f in row["schema"]["fields"]]
        return dict(zip(names, row["values"]))
    return row


def state_keys_of(result: Any) -> int | None:
    """State keys over every Kafka partition as of ``result``'s batch (None if unknown).

    Parameters
    ----------
    result
        A ``BatchResult`` (its ``processor`` reads the committed state's figures).

    Runs on
    -------
    driver"""
    totals = state_totals_of(result)
    return None if totals is None else totals[0]


def state_totals_of(result: Any) -> tuple[int, dict[str, int] | None] | None:
    """(state keys over every Kafka partition, partition -> state bytes, or None when a
    partition's size is not in its commit) as of ``result``'s batch; None if unknown.

    Parameters
    ----------
    result
        A ``BatchResult``; a failure to read its state's figures gives None, never raises.

    Runs on
    -------
    driver"""
    processor = getattr(result, "processor", None)
    if processor is None:
        return None
    try:
        states = processor.partition_states(int(result.batch_id))
    except Exception:  # noqa: BLE001 - a figure, never a failure
        return None
    keys = sum(int(getattr(b, "num_keys", 0) or 0) for b in states.values())
    sizes = {pid: getattr(b, "state_bytes", None) for pid, b in states.items()}
    known = all(v is not None for v in sizes.values())
    return keys, ({pid: int(v or 0) for pid, v in sizes.items()} if known else None)


_METRICS: tuple[tuple[str, str, str, str], ...] = (
    # (metric name, Figures field, type, help)
    ("orderedstream_batches_total", "batches", "counter", "Micro-batches committed"),
    ("orderedstream_batches_skipped_total", "skipped_batches", "counter",
     "Replayed batches found already committed (skipped)"),
    ("orderedstream_last_batch_id", "last_batch_id", "gauge", "Id of the last committed batch"),
    ("orderedstream_records_total", "records", "counter",
     "Kafka records processed by the ordered stage"),
    ("orderedstream_output_rows_total", "output_rows", "counter", "Output rows committed"),
    ("orderedstream_output_files_total", "output_files", "counter", "Output files committed"),
    ("orderedstream_state_keys", "state_keys", "gauge", "State keys after the last batch"),
    ("orderedstream_state_bytes", "state_bytes", "gauge",
     "State bytes (SST files) of the latest versions known"),
    ("orderedstream_state_restores_total", "restores", "counter",
     "Partition states restored from the object store"),
    ("orderedstream_restarts_total", "restarts", "counter", "Query restarts after a failure"),
    ("orderedstream_last_batch_records", "last_records", "gauge", "Records in the last batch"),
    ("orderedstream_last_batch_output_rows", "last_output_rows", "gauge",
     "Output rows of the last batch"),
    ("orderedstream_last_batch_output_files", "last_output_files", "gauge",
     "Output files of the last batch"),
    ("orderedstream_last_batch_duration_ms", "last_batch_ms", "gauge",
     "Wall time of the last foreachBatch call, milliseconds"),
    ("orderedstream_last_state_commit_ms", "last_state_commit_ms", "gauge",
     "Slowest task's state commit in the last batch, milliseconds"),
    ("orderedstream_last_update_timestamp_seconds", "updated", "gauge",
     "Unix time of the last update"),
)


def prometheus_text(figures: Figures, labels: Mapping[str, str] | None = None) -> str:
    """Prometheus text exposition format (version 0.0.4) of ``figures``.

    Parameters
    ----------
    figures
        The figures; a field that is None is left out.
    labels
        Labels of every sample (``{"query": name}``); None: none."""
    label_text = ""
    if labels:
        label_text = "{" + ",".join(
            f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"
    lines = []
    for name, attr, kind, help_text in _METRICS:
        value = getattr(figures, attr)
        if value is None:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                  f"{name}{label_text} {_number(value)}"]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{float(value):.3f}"


def write_metrics_file(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temporary file in the same folder, rename).

    Parameters
    ----------
    path
        The metrics file; its folder is created.
    text
        The new content.

    Raises
    ------
    OSError
        The folder or the file cannot be written (the temporary file is removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def observe_input(df: Any) -> Any:
    """``df`` with observed metrics Spark reports in ``StreamingQueryProgress.observedMetrics
    ["orderedstream"]``: ``records`` (Kafka records of the batch; in ``emit=ranges`` mode the
    sum of the ranges' lengths) and ``kafka_partitions``.

    Parameters
    ----------
    df
        The streaming Kafka DataFrame (records or ``emit=ranges`` rows); another is
        returned as it is.

    Runs on
    -------
    driver (the plan); Spark computes the metrics on the executors"""
    from pyspark.sql import functions as F

    columns = set(df.columns)  # literals as SQL: F.lit imports pandas (see inplan)
    if {"startOffset", "endOffset"} <= columns:  # emit=ranges: one row per Kafka range
        records = F.sum(F.col("endOffset") - F.col("startOffset"))
        parts = F.count(F.expr("1"))
    elif "offset" in columns:
        records = F.count(F.expr("1"))
        parts = F.approx_count_distinct(F.concat_ws(":", "topic", "partition"))
    else:
        return df
    return df.observe(OBSERVED_NAME, F.coalesce(records, F.expr("0")).cast("long").alias("records"),
                      parts.cast("long").alias("kafka_partitions"))
