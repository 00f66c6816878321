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


@pytest.mark.chaos
@pytest.mark.slow  # its own run: scripts/test -m "chaos and slow"
@pytest.mark.parametrize("store", ["azure", "gcs"])
def test_job_survives_kills_with_its_state_on_a_cloud_store(tmp_path: Path, store: str) -> None:
    """kill -9 of the job, of a Python worker and of the broker with the state and the output
    (Delta on Azure, fenced Parquet on GCS) on the cloud store's emulator; verified."""
    gen = GeneratorOptions(prefix=f"chaos{store}", sites=2, late_sites=0, partitions=2,
                           sessions_per_site=5, rows=5, updates=30, seed=7, rate=60.0)
    run = ChaosRun(tmp_path / "chaos", faults=3, seed=7, gen=gen, max_offsets_per_trigger=600,
                   store=store)
    report = run.run()
    print(report.markdown())
    assert report.total_faults == 3 and report.faults.get("kill_driver", 0) >= 1
    assert report.records_checked > 0 and report.batches_committed > 3
    assert (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0), report.examples
    assert report.dead_letters_missing == 0 and report.wrong_final_tables == 0
    assert report.ok
