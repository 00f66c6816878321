"""A short chaos run inside CI: one fault of each kind against the main job, then verification.

The long run (>= 50 faults) is ``scripts/chaos``; this one proves the machinery on every change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orderedstream.app.chaos.runner import FAULTS, ChaosRun
from orderedstream.app.job.generator import GeneratorOptions


@pytest.mark.chaos
def test_job_survives_one_fault_of_each_kind(tmp_path: Path) -> None:
    gen = GeneratorOptions(prefix="chaos", sites=2, late_sites=1, partitions=2,
                           sessions_per_site=6, rows=5, updates=40, seed=5, rate=60.0)
    run = ChaosRun(tmp_path / "chaos", faults=len(FAULTS), seed=5, gen=gen,
                   max_offsets_per_trigger=600)
    report = run.run()
    print(report.markdown())
    assert report.total_faults == len(FAULTS)
    assert set(report.faults) <= set(FAULTS) and report.faults.get("kill_driver", 0) >= 1
    assert report.records_checked > 0
    assert report.batches_committed > len(FAULTS)
    assert (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0), report.examples
    assert report.dead_letters_missing == 0 and report.wrong_final_tables == 0
    assert report.ok
