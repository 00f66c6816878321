"""What every benchmark case shares: the result record, timing, peak RSS, the case contract.

A case is a module in ``benchmarks/cases/`` with ``run(ctx: CaseContext) -> list[Result]``.
It runs in a fresh process started by ``benchmarks.run``; ``python -m benchmarks.cases.<name>``
is never needed by hand.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Result:
    """One compared figure: ours vs Spark's own, measured the same way in the same run."""

    case: str
    metric: str
    unit: str
    ours: float
    baseline: float | None
    baseline_name: str | None
    how: str
    higher_is_better: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """ours / baseline for throughput-like metrics, baseline / ours for costs (>1 = we win);
        None when either is zero or negative (a slope: a ratio of signed figures means nothing)."""
        if not self.baseline or not self.ours or self.baseline < 0 or self.ours < 0:
            return None
        return self.ours / self.baseline if self.higher_is_better else self.baseline / self.ours

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


@dataclass(frozen=True)
class CaseContext:
    """Where the services are and how big to go; handed to a case as JSON."""

    bootstrap: str
    s3_endpoint: str
    storage_options: dict[str, Any]
    bucket: str
    workdir: str
    size: str
    scale: dict[str, int]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CaseContext:
        return cls(**json.loads(text))

    def s3_url(self, *parts: str) -> str:
        return "s3://" + "/".join([self.bucket, *parts])


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    """``with timed() as t: ...`` then ``t["seconds"]``."""
    box: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield box
    finally:
        box["seconds"] = time.perf_counter() - start


def peak_rss_mb(children: bool = True) -> float:
    """Peak resident set size of this process (and of its waited-for children), in MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if children else 0
    return max(own, kids) / 1024.0


def write_results(path: Path, results: list[Result]) -> None:
    path.write_text(json.dumps([r.as_dict() for r in results], indent=2))


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; None when empty.

    Nearest rank is the smallest value with at least ``q`` of the values at or below it
    (numpy's ``inverted_cdf``): always one of the values, so a p99 is a latency that happened.
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return None
    return float(np.percentile(data, q * 100, method="inverted_cdf"))


def slope_per_minute(series: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``(epoch seconds, value)`` points, in value per minute (0.0
    with fewer than two points or no time span)."""
    if len(series) < 2:
        return 0.0
    t = np.asarray([p[0] for p in series], dtype=np.float64)
    v = np.asarray([p[1] for p in series], dtype=np.float64)
    if np.ptp(t) == 0:
        return 0.0
    return float(np.polyfit(t - t[0], v, 1)[0] * 60.0)


def slope_error_per_minute(series: Sequence[tuple[float, float]]) -> float:
    """Standard error of ``slope_per_minute``'s slope (inf with fewer than four points)."""
    if len(series) < 4:
        return float("inf")
    t = np.asarray([p[0] for p in series], dtype=np.float64)
    v = np.asarray([p[1] for p in series], dtype=np.float64)
    if np.ptp(t) == 0:
        return float("inf")
    _, cov = np.polyfit(t - t[0], v, 1, cov=True)
    return float(np.sqrt(cov[0][0]) * 60.0)


def second_half(series: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points of the later half of a time series' span."""
    if not series:
        return []
    mid = (series[0][0] + series[-1][0]) / 2
    return [p for p in series if p[0] >= mid]


def last_seconds(series: Sequence[tuple[float, float]], seconds: float
                 ) -> list[tuple[float, float]]:
    """The points of a time series' last ``seconds`` (all of it when it is shorter)."""
    if not series:
        return []
    return [p for p in series if p[0] >= series[-1][0] - seconds]


def batch_durations_ms(progress: list[dict[str, Any]]) -> list[float]:
    """Per-batch wall time (``durationMs.triggerExecution``) of the batches that read data.

    Same measure for every engine in a streaming query (``foreachBatch`` work included), taken
    from ``query.recentProgress``; keep ``spark.sql.streaming.numRecentProgressUpdates`` above
    the batch count so none is dropped.
    """
    return [float(p["durationMs"]["triggerExecution"]) for p in progress
            if p.get("numInputRows") and "triggerExecution" in p.get("durationMs", {})]


class RssSampler:
    """Peak summed RSS of this process and all its descendants (Spark's JVM, Python workers,
    executors), sampled every ``interval`` seconds while the ``with`` block runs."""

    def __init__(self, interval: float = 0.5) -> None:
        import threading

        self.interval = interval
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def sample(self) -> float:
        import psutil

        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total / 2**20

    def _run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, self.sample())
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.peak_mb = max(self.peak_mb, self.sample())
