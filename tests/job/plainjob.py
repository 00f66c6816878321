"""The main job as a user starts it from their own shell (``run --master``, spark-submit): a
small generated input, the environment a user's shell has, the exactly-once check, and the
features a user runs after it in the same kind of session (``rocksstate``, ``fencedparquet``,
replay)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from orderedstream.app.job.demo import verify_output
from orderedstream.app.job.generator import GeneratorOptions, GeneratorStats, generate
from orderedstream.app.job.pipeline import JobOptions, make_processor
from orderedstream.core import tuning
from orderedstream.sinks.table import FencedTable
from tests.fixtures import unique
from tests.job.afterjob import assert_replays, assert_state_rows, state_batch

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


PLAIN_FEATURES = Path(__file__).with_name("plain_features.py")
"""The user's own script the plain-session checks run: ``rocksstate`` and ``fencedparquet``."""


def assert_plain_features(launcher: list[str], env: dict[str, str], *, kafka: Any, s3: Any,
                          opts: JobOptions, generated: GeneratorStats, tmp_path: Path) -> None:
    """After the main job, in the same kind of session (``launcher`` starts
    :data:`PLAIN_FEATURES`: ``python`` or ``spark-submit ...``): ``rocksstate`` reads a batch's
    state as ``StateInspector`` does, an ``orderedkafka`` to ``fencedparquet`` copy of the
    topics holds every offset once, and every batch replays identically."""
    storage = s3.storage_options
    batch = state_batch(opts.output, storage)
    parquet = s3.url(unique("plaincopy"))
    proc = subprocess.run(
        [*launcher, str(PLAIN_FEATURES), "--state", opts.state_location, "--output",
         opts.output, "--storage-options", json.dumps(storage), "--batch", str(batch),
         "--bootstrap", kafka.bootstrap, "--topic-pattern", opts.topic_pattern,
         "--parquet", parquet, "--checkpoint", str(tmp_path / "copy-checkpoint")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [{**r, "key": bytes.fromhex(r["key"])}
            for r in json.loads(proc.stdout.strip().splitlines()[-1])]
    assert_state_rows(rows, output=opts.output, state=opts.state_location,
                      storage_options=storage, batch=batch)
    copied = FencedTable(parquet, storage).to_arrow()
    got = sorted(zip(copied["topic"].to_pylist(), copied["partition"].to_pylist(),
                     copied["offset"].to_pylist()))
    sent = sorted((t, p, o) for t in generated.topics
                  for p, end in kafka.end_offsets(t).items() for o in range(end))
    assert got == sent, (len(got), len(sent), generated.topics, got[:3], sent[:3])
    assert_replays(bootstrap=kafka.bootstrap, output=opts.output, state=opts.state_location,
                   checkpoint=opts.checkpoint, storage_options=storage,
                   scratch=tmp_path / "replay", endpoint=["--s3-endpoint", s3.endpoint],
                   env=env)
