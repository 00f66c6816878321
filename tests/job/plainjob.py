"""The main job as a user starts it from their own shell (``run --master``, spark-submit): a
small generated input, the environment a user's shell has, and the exactly-once check."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orderedstream.app.job.demo import verify_output
from orderedstream.app.job.generator import GeneratorOptions, GeneratorStats, generate
from orderedstream.app.job.pipeline import JobOptions, make_processor
from orderedstream.core import tuning
from tests.fixtures import unique

NOT_IN_A_USERS_SHELL = (tuning.ENV, "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET",
                        "SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON",
                        "PYSPARK_DRIVER_PYTHON")
"""What the test process has that a user's shell would not: the tuning switch and the
variables of the test process's own Spark session."""


def users_shell_env(**extra: str) -> dict[str, str]:
    """This process's environment without :data:`NOT_IN_A_USERS_SHELL`, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_IN_A_USERS_SHELL}
    env.update(extra)
    return env


def small_job(kafka: Any, s3: Any, tmp_path: Path, name: str,
              seed: int) -> tuple[JobOptions, GeneratorStats]:
    """A generated input on two partitions and the job's options (state and output on S3)."""
    prefix = unique(name)
    gen = GeneratorOptions(prefix=prefix, sites=2, late_sites=0, partitions=2,
                           sessions_per_site=4, rows=3, updates=12, bad_fraction=0.05, seed=seed)
    generated = generate(kafka.bootstrap, gen, create_topic=kafka.create_topic)
    opts = JobOptions(bootstrap=kafka.bootstrap, output=s3.url(unique(f"{name}out")),
                      state_location=s3.url(unique(f"{name}state")),
                      checkpoint=str(tmp_path / "checkpoint"), topic_pattern=f"{prefix}-.*",
                      storage_options=s3.storage_options)
    return opts, generated


def assert_exactly_once(opts: JobOptions, generated: GeneratorStats) -> None:
    """Every generated record applied once, in order, or dead-lettered; final tables right."""
    verdict = verify_output(make_processor(opts), opts)
    assert verdict.checked == verdict.expected_changes > 0
    assert verdict.expected_changes + verdict.expected_dead_letters == generated.records
    assert (verdict.lost, verdict.duplicated, verdict.out_of_order,
            verdict.dead_letters_missing, verdict.wrong_final_tables) == (0, 0, 0, 0, 0), \
        verdict.examples
