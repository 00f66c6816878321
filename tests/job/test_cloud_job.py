"""The main job end to end with its state and Delta output on Azure Blob (Azurite), and with its
state on Google Cloud Storage (fake-gcs-server): exactly once and in order, verified against
Kafka by reading the output with delta-rs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orderedstream.app.job.demo import run_demo
from orderedstream.app.job.generator import GeneratorOptions
from orderedstream.sinks.deltalog import table_format
from tests.fixtures import unique


def _gen() -> GeneratorOptions:
    return GeneratorOptions(prefix=unique("cloudjob"), sites=2, late_sites=0, partitions=2,
                            sessions_per_site=4, rows=4, updates=20, bad_fraction=0.05, seed=11)


def _check(result) -> None:
    v = result.verification
    assert v.checked == v.expected_changes > 0
    assert (v.lost, v.duplicated, v.out_of_order, v.dead_letters_missing,
            v.wrong_final_tables) == (0, 0, 0, 0, 0), v.examples
    assert result.batches >= 2


def test_job_keeps_state_and_delta_output_on_azure(azurite, spark, kafka, tmp_path: Path,
                                                    ) -> None:
    result = run_demo(spark, kafka.bootstrap, azurite.storage_options,
                      azurite.url(unique("job")), tmp_path, _gen(), kafka.create_topic,
                      out=lambda _line: None, max_offsets_per_trigger=120)
    _check(result)
    assert result.output.startswith("az://")
    assert table_format(result.output, azurite.storage_options) == "delta"


@pytest.mark.slow  # the Azure case covers the job path in CI
def test_job_keeps_state_on_gcs(gcs, spark, kafka, tmp_path: Path) -> None:
    """State on gs://; the Delta output on local disk (the emulator has no XML API PUT, which
    delta-rs writes with)."""
    base = gcs.url(unique("job"))
    result = run_demo(spark, kafka.bootstrap, gcs.storage_options, base,
                      tmp_path, _gen(), kafka.create_topic, out=lambda _line: None,
                      max_offsets_per_trigger=120, output=str(tmp_path / "output"))
    _check(result)
    state = gcs.filesystem().find(f"{base.removeprefix('gs://')}/state")
    assert any(name.endswith(".sst") or "manifest" in name for name in state), state[:5]
