"""The main job end to end on the shared services: generate while running, verify against Kafka."""

from __future__ import annotations

from pathlib import Path

from orderedstream.app.job.demo import run_demo
from orderedstream.app.job.generator import GeneratorOptions
from orderedstream.sinks.deltalog import table_format
from tests.fixtures import unique


def test_demo_job_rebuilds_sessions_exactly_once_in_order(spark, kafka, s3, tmp_path: Path) -> None:
    gen = GeneratorOptions(prefix=unique("jobsessions"), sites=2, late_sites=1, partitions=2,
                           sessions_per_site=5, rows=4, updates=25, bad_fraction=0.05, seed=9)
    lines: list[str] = []
    result = run_demo(spark, kafka.bootstrap, s3.storage_options, s3.url(unique("job")),
                      tmp_path, gen, kafka.create_topic, out=lines.append,
                      max_offsets_per_trigger=150)
    v = result.verification
    assert result.generated.records == v.expected_changes + v.expected_dead_letters
    assert v.checked == v.expected_changes > 0
    assert v.expected_dead_letters == result.generated.bad_records > 0
    assert (v.lost, v.duplicated, v.out_of_order, v.dead_letters_missing,
            v.wrong_final_tables) == (0, 0, 0, 0, 0), v.examples
    assert result.batches >= 2
    assert table_format(result.output, s3.storage_options) == "delta"  # the default output
    # the late site's topic was discovered while the query ran
    assert len(result.generated.topics) == 3
    assert any(line.startswith("[demo] generating") for line in lines)
