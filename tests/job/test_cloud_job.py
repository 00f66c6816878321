"""The main job end to end on Azure Blob (Azurite: state and Delta output) and on Google Cloud
Storage (fake-gcs-server: state and fenced Parquet output): exactly once and in order, verified
against Kafka; then its batches replayed (``replay``, the API and the CLI with the store's
endpoint flag) and its state read with ``format("rocksstate")``, both from the cloud store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from orderedstream.app.job.demo import run_demo
from orderedstream.app.job.generator import GeneratorOptions
from orderedstream.sinks.deltalog import table_format
from pyspark_rocksstate import DefaultSource
from tests.fixtures import unique
from tests.job.afterjob import assert_replays, assert_state_rows, state_batch


def _gen() -> GeneratorOptions:
    return GeneratorOptions(prefix=unique("cloudjob"), sites=2, late_sites=0, partitions=2,
                            sessions_per_site=4, rows=4, updates=20, bad_fraction=0.05, seed=11)


def _check(result) -> None:
    v = result.verification
    assert v.checked == v.expected_changes > 0
    assert (v.lost, v.duplicated, v.out_of_order, v.dead_letters_missing,
            v.wrong_final_tables) == (0, 0, 0, 0, 0), v.examples
    assert result.batches >= 2


def _replay_and_read_state(spark: Any, bootstrap: str, server: Any, output: str, state: str,
                           checkpoint: str, scratch: Path, endpoint_flag: str) -> None:
    """Every batch replays identically from the cloud store (API and CLI), and ``rocksstate``
    reads the state a batch committed as ``orderedstream state`` does."""
    opts = server.storage_options
    assert_replays(bootstrap=bootstrap, output=output, state=state, checkpoint=checkpoint,
                   storage_options=opts, scratch=scratch,
                   endpoint=[endpoint_flag, server.endpoint])
    batch = state_batch(output, opts)
    spark.dataSource.register(DefaultSource)
    rows = (spark.read.format("rocksstate").option("path", state).option("table", output)
            .option("storage_options", json.dumps(opts)).option("batchId", str(batch))
            .load().collect())
    assert_state_rows([{**r.asDict(), "key": bytes(r.key)} for r in rows], output=output,
                      state=state, storage_options=opts, batch=batch)


def test_job_keeps_state_and_delta_output_on_azure(azurite, spark, kafka, tmp_path: Path) -> None:
    base = azurite.url(unique("job"))
    result = run_demo(spark, kafka.bootstrap, azurite.storage_options, base, tmp_path, _gen(),
                      kafka.create_topic, out=lambda _line: None, max_offsets_per_trigger=120)
    _check(result)
    assert result.output.startswith("az://")
    assert table_format(result.output, azurite.storage_options) == "delta"
    _replay_and_read_state(spark, kafka.bootstrap, azurite, result.output, f"{base}/state",
                           str(tmp_path / "checkpoint"), tmp_path, "--azure-endpoint")


def test_job_keeps_state_and_fenced_parquet_output_on_gcs(gcs, spark, kafka, tmp_path: Path
                                                          ) -> None:
    """State and fenced Parquet output on gs:// (Delta output is refused there: the emulator
    has no XML API PUT, which delta-rs writes with; docs/storage.md)."""
    base = gcs.url(unique("job"))
    result = run_demo(spark, kafka.bootstrap, gcs.storage_options, base, tmp_path, _gen(),
                      kafka.create_topic, out=lambda _line: None, max_offsets_per_trigger=120,
                      output_format="parquet")
    _check(result)
    assert result.output.startswith("gs://")
    assert table_format(result.output, gcs.storage_options) == "parquet"
    _replay_and_read_state(spark, kafka.bootstrap, gcs, result.output, f"{base}/state",
                           str(tmp_path / "checkpoint"), tmp_path, "--gcs-endpoint")
    # maintenance: the sink commands serve the fenced Parquet table on gs://; the Delta ones
    # (`table`) refuse it, naming the URL and the commands that fit
    endpoint = ["--gcs-endpoint", gcs.endpoint]
    verified = _cli("sink", "verify", result.output, *endpoint)
    assert verified.returncode == 0 and verified.stdout.splitlines()[-1] == "OK", verified
    batches = _cli("sink", "batches", result.output, *endpoint)
    assert batches.returncode == 0 and len(batches.stdout.splitlines()) > result.batches
    refused = _cli("table", "history", result.output, *endpoint)
    assert refused.returncode == 2 and not refused.stdout
    assert refused.stderr.startswith(f"orderedstream: OptionError: {result.output} is not a "
                                     "Delta table"), refused.stderr
    assert "'orderedstream sink ...'" in refused.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orderedstream.app.cli", *args],
                          capture_output=True, text=True, timeout=300)
