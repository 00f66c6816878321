"""Every benchmark case runs to its figures: ``scripts/bench --size tiny`` against real services.

The cases drive the pack's public paths (the main job, its Delta output, the ordered stage)
and rot silently when those change: once two of them (``endtoend`` read the job's
Delta output as fenced Parquet; ``ordered`` listed figures of engines it had not run) had
failed since the job's default output became Delta. A whole tiny run runs every case, so it
is marked slow (CI runs ``-m "not slow"``): run it before a benchmark report is published,
``scripts/test -m slow tests/benchmarks/test_cases_tiny.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the whole suite, not pytest-timeout's 600 s for one test
def test_every_case_gives_figures(tmp_path: Path) -> None:
    from benchmarks.run import available_cases

    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--size", "tiny",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=3600, check=False)
    assert (out / "report.json").exists(), done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    failures = report["meta"]["failures"]
    assert not failures, "cases failed:\n" + "\n".join(f"{k}: {v}" for k, v in failures.items())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert report["meta"]["cases"] == available_cases()
    empty = [case for case, count in report["meta"]["figures"].items() if count == 0]
    assert not empty, f"cases without figures: {empty}"
    assert sum(report["meta"]["figures"].values()) == len(report["results"])
