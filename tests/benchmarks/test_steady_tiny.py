"""The steady-rate case runs to a full report: ``scripts/bench --size tiny --only steady``.

Real Kafka, S3, Spark and Quix Streams, a few minutes on 2 cores, so marked slow. It checks
the report's shape and that its figures are sane (rates found, every record committed,
latencies ordered), never how fast anything was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METRICS = {"max sustainable rate", "max sustainable rate per core", "latency p50",
           "latency p99", "latency max", "CPU per record", "peak RSS", "final RSS",
           "RSS slope", "cluster: 2 vs 1 executors"}
TARGET_ROWS = ("max sustainable rate per core", "latency p99", "peak RSS", "RSS slope")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_steady_tiny_gives_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--size", "tiny",
                           "--only", "steady", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, check=False)
    assert (out / "report.json").exists(), done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert not report["meta"]["failures"], report["meta"]["failures"]
    rows = {r["metric"]: r for r in report["results"] if r["case"] == "steady"}
    assert set(rows) == METRICS

    for name in ("max sustainable rate", "max sustainable rate per core", "CPU per record",
                 "peak RSS", "final RSS", "cluster: 2 vs 1 executors"):
        assert rows[name]["ours"] > 0, name
        assert rows[name]["baseline"] > 0, name
    for side in ("ours", "baseline"):
        p50, p99, top = (rows[f"latency {q}"][side] for q in ("p50", "p99", "max"))
        assert 0 < p50 <= p99 <= top, (side, p50, p99, top)
        assert rows["peak RSS"][side] >= rows["final RSS"][side]
    assert rows["latency p99"]["extra"]["uncommitted"] == [0, 0]
    assert rows["latency p99"]["extra"]["caught_up"] == [True, True]
    for name in TARGET_ROWS:
        assert rows[name]["how"].startswith(("met: ", "missed: ")), rows[name]["how"]
    steps = rows["max sustainable rate"]["extra"]
    assert any(s["held"] for s in steps["pack_steps"])
    assert any(s["held"] for s in steps["quix_steps"])
