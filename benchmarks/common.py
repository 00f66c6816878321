"""What every benchmark case shares: the result record, timing, peak RSS, the case contract.

A case is a module in ``benchmarks/cases/`` with ``run(ctx: CaseContext) -> list[Result]``.
It runs in a fresh process started by ``benchmarks.run``; ``python -m benchmarks.cases.<name>``
is never needed by hand.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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
        """ours / baseline for throughput-like metrics, baseline / ours for costs (>1 = we win)."""
        if not self.baseline or not self.ours:
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
