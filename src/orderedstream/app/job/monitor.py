"""Live progress of the main job: one pinned screen on a terminal, plain lines elsewhere.

``ProgressView`` renders: with ``rich`` a live panel (phase, records/s, lag per topic, batch
duration, state keys and bytes, output rows and files, restarts) when stdout is a terminal;
otherwise one line per phase change and one figures line every ``every`` seconds (CI, log
files). ``JobMonitor`` polls the query (``status``, ``lastProgress``), the figures of the
ordered stage and Kafka's end offsets, and names the start-up phases as they happen.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from orderedstream.app.job.figures import Figures, FigureTracker

_log = logging.getLogger(__name__)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GB"


class ProgressView:
    """Where progress goes: a rich live panel on a terminal, plain lines otherwise."""

    def __init__(self, title: str, *, out: Callable[[str], None] | None = None,
                 live: bool | None = None, every: float = 10.0, prefix: str = "[job]") -> None:
        self.title, self.prefix, self.every = title, prefix, every
        self.out = out or (lambda line: print(line, flush=True))
        stream = sys.stdout
        self.live_mode = (live if live is not None
                          else out is None and hasattr(stream, "isatty") and stream.isatty())
        self._live: Any = None
        self._phase = ""
        self._last_line = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> ProgressView:
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render({}), console=Console(file=sys.stdout),
                              refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def print(self, line: str) -> None:
        """A permanent line above the live panel (or a plain line).

        Parameters
        ----------
        line
            The text, printed as it is (no markup)."""
        with self._lock:
            if self._live is not None:
                self._live.console.print(line, markup=False, highlight=False)
            else:
                self.out(line)

    def phase(self, text: str) -> None:
        """A start-up phase (or a state change): shown as it happens, once.

        Parameters
        ----------
        text
            The phase in words; the same text again prints nothing."""
        if text == self._phase:
            return
        self._phase = text
        if self._live is not None:
            self._live.update(self._render({}))
        self.print(f"{self.prefix} {text}")

    def update(self, view: dict[str, Any], force: bool = False) -> None:
        """New figures: redraw the panel, or print a line every ``every`` seconds.

        Parameters
        ----------
        view
            ``figures``, ``lag`` (topic -> records, or None), ``rate`` and ``elapsed``.
        force
            Print the line now, whenever the previous one was."""
        if self._live is not None:
            with self._lock:
                self._live.update(self._render(view))
            return
        now = time.monotonic()
        if force or now - self._last_line >= self.every:
            self._last_line = now
            self.out(self.line(view))

    def line(self, v: dict[str, Any]) -> str:
        """The plain progress line of the figures in ``v``.

        Parameters
        ----------
        v
            As ``update``'s ``view``."""
        f: Figures = v.get("figures") or Figures()
        lag = v.get("lag")
        lag_text = "?" if lag is None else f"{sum(lag.values()):,}"
        last = f.last_batch_id if f.last_batch_id is not None else "-"
        return (f"{self.prefix} {v.get('elapsed', 0):5.0f}s  batch {last}  records "
                f"{f.records:,}  {v.get('rate', 0.0):,.0f} rec/s  lag {lag_text}  "
                f"batch {f.last_batch_ms:,.0f} ms  state {f.state_keys:,} keys "
                f"{_size(f.state_bytes)}  output {f.output_rows:,} rows {f.output_files:,} files"
                f"  restarts {f.restarts}")

    def _render(self, v: dict[str, Any]) -> Any:
        from rich.panel import Panel
        from rich.table import Table

        f: Figures = v.get("figures") or Figures()
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        grid.add_row("phase", self._phase or "-")
        grid.add_row("elapsed", f"{v.get('elapsed', 0):.0f} s")
        grid.add_row("batches", f"{f.batches:,} committed (last id "
                     f"{f.last_batch_id if f.last_batch_id is not None else '-'}), "
                     f"{f.skipped_batches} replays skipped")
        grid.add_row("records", f"{f.records:,} total, {v.get('rate', 0.0):,.0f} rec/s "
                     "(last batch)")
        grid.add_row("batch duration", f"{f.last_batch_ms:,.0f} ms (state commit "
                     f"{f.last_state_commit_ms:,.0f} ms), {f.last_records:,} records")
        grid.add_row("state", f"{f.state_keys:,} keys, {_size(f.state_bytes)}, "
                     f"{f.restores} restores")
        grid.add_row("output", f"{f.output_rows:,} rows in {f.output_files:,} files")
        grid.add_row("restarts", str(f.restarts))
        lag = v.get("lag")
        if lag is None:
            grid.add_row("lag", "?")
        else:
            total = sum(lag.values())
            shown = sorted(lag.items())[:8]
            text = ", ".join(f"{t} {n:,}" for t, n in shown)
            more = f" (+{len(lag) - len(shown)} topics)" if len(lag) > len(shown) else ""
            grid.add_row("lag", f"{total:,} records: {text}{more}" if lag else "0")
        return Panel(grid, title=self.title, expand=False)


def batch_rate(figures: Figures) -> float:
    """Kafka records per second of the last batch (its records over its duration). Not
    Spark's ``processedRowsPerSecond``: with ``emit=ranges`` a Spark row is a Kafka range.

    Parameters
    ----------
    figures
        The job's figures; 0.0 before a batch with a duration."""
    if figures.last_batch_ms <= 0:
        return 0.0
    return figures.last_records * 1000.0 / figures.last_batch_ms


class JobMonitor:
    """Polls the running query and feeds a :class:`ProgressView`; names start-up phases."""

    def __init__(self, query: Any, opts: Any, view: ProgressView, tracker: FigureTracker,
                 *, lag_every: float = 5.0, poll: float = 1.0,
                 from_progress: bool = False) -> None:
        """``from_progress``: the batches' figures come from the query's progress
        (``FigureTracker.on_progress``; a Spark Connect run, whose batch function runs on the
        server) instead of the driver's ``on_batch`` callback."""
        self.query, self.opts, self.view, self.tracker = query, opts, view, tracker
        self.lag_every, self.poll = lag_every, poll
        self.from_progress = from_progress
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-monitor", daemon=True)
        self.started = time.monotonic()
        self._lag: dict[str, int] | None = None
        self._lag_at = 0.0

    def __enter__(self) -> JobMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._read_progress()  # the batches since the last poll

    def _read_progress(self) -> None:
        if not self.from_progress:
            return
        try:
            progresses = list(self.query.recentProgress)
        except Exception as exc:  # noqa: BLE001 - progress must not kill the job
            _log.debug("progress failed: %s", exc)
            return
        for progress in progresses:
            batch = int(progress["batchId"])
            if batch not in self._seen and self.tracker.on_progress(progress):
                self._seen.add(batch)

    def phase_now(self) -> str:
        """What the query is doing, in words (before and after its first batch)."""
        figures = self.tracker.figures
        try:
            status = self.query.status or {}
        except Exception:  # noqa: BLE001 - the query may be stopping
            status = {}
        message = str(status.get("message") or "").lower()
        if figures.batches:
            return "running"
        if message.startswith("initializing"):
            return "first plan: starting the Kafka source's Python workers"
        if message.startswith(("getting offsets", "writing offsets")):
            return "first batch: planning its Kafka offset ranges"
        if message.startswith("processing"):
            return "first batch: running the ordered stage (Python workers start)"
        if message.startswith("waiting for data"):
            return "waiting for data in Kafka"
        return f"first plan: {message or 'starting'}"

    def view_now(self) -> dict[str, Any]:
        """The figures for ``ProgressView.update``, the Kafka lag re-read at most every
        ``lag_every`` seconds (None when it cannot be read)."""
        from orderedstream.app.job.pipeline import lag_per_topic

        now = time.monotonic()
        if now - self._lag_at >= self.lag_every:
            self._lag_at = now
            try:
                self._lag = lag_per_topic(self.query, self.opts.bootstrap,
                                          self.opts.topic_pattern, self.opts.checkpoint)
            except Exception as exc:  # noqa: BLE001 - progress must not kill the job
                _log.debug("lag failed: %s", exc)
                self._lag = None
        figures = self.tracker.figures
        return {"figures": figures, "lag": self._lag, "rate": batch_rate(figures),
                "elapsed": now - self.started}

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self._read_progress()
                if not self.query.isActive:
                    return
                self.view.phase(self.phase_now())
                self.view.update(self.view_now())
            except Exception as exc:  # noqa: BLE001
                _log.debug("progress failed: %s", exc)

