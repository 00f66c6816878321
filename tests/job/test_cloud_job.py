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
from orderedstream.sinks.deltalog import open_batch_log, table_format
from orderedstream.statestore.ordered.plan import EXTRA_KEY, bases_from_extra
from orderedstream.statestore.ordered.replay import replay
from orderedstream.statestore.ordered.state_inspect import StateInspector
from orderedstream.statestore.ordered.state_source import json_text
from pyspark_rocksstate import DefaultSource
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


def _replay_and_read_state(spark: Any, bootstrap: str, server: Any, output: str, state: str,
                           checkpoint: str, scratch: Path, endpoint_flag: str) -> None:
    """Every batch of every Kafka partition replays identically from the cloud store's state
    and output (one range per partition through the API, one batch through the CLI), and
    ``rocksstate`` reads the state a batch committed as ``orderedstream state`` does."""
    opts = server.storage_options
    log = open_batch_log(output, opts)
    latest = log.latest()
    assert latest is not None and latest >= 1
    tasks = {b: log.get(b).extra[EXTRA_KEY]["tasks"] for b in range(latest + 1)}
    first_batch = {pid: min(b for b in tasks if pid in tasks[b])
                   for b_tasks in tasks.values() for pid in b_tasks}
    assert len(first_batch) >= 2, first_batch
    replayed = 0
    for pid, first in sorted(first_batch.items()):
        topic, _, number = pid.rpartition("/")
        result = replay(output=output, state=state, checkpoint=checkpoint, topic=topic,
                        partition=int(number), first=first, last=latest,
                        bootstrap_servers=bootstrap, storage_options=opts,
                        scratch=str(scratch / unique("api")))
        assert result.identical, (pid, result.output.first, result.state.first)
        assert result.batches and all(b.replayed_rows == b.committed_rows for b in result.batches)
        replayed += sum(b.replayed_rows for b in result.batches)
    assert replayed > 0
    pid, first = sorted(first_batch.items())[0]
    done = subprocess.run(
        [sys.executable, "-m", "orderedstream.app.cli", "replay", "--bootstrap-servers",
         bootstrap, endpoint_flag, server.endpoint, "--output", output,
         "--state", state, "--checkpoint", checkpoint, "--batch", str(first), "--partition",
         pid.replace("/", ":"), "--scratch", str(scratch / unique("cli"))],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "identical", done.stdout

    # the first batch whose state holds keys (ended sessions leave none)
    batch = next(b for b in range(latest + 1)
                 if sum(int(p.num_keys or 0) for p in bases_from_extra(log.get(b).extra).values()))
    spark.dataSource.register(DefaultSource)
    rows = (spark.read.format("rocksstate").option("path", state).option("table", output)
            .option("storage_options", json.dumps(opts)).option("batchId", str(batch))
            .load().collect())
    inspector = StateInspector(output=output, state=state, storage_options=opts)
    bases = inspector.partitions(batch)
    assert len(rows) == sum(int(b.num_keys or 0) for b in bases.values()) > 0
    assert {f"{r.topic}/{r.partition}": r.version for r in rows} == {
        pid: b.version for pid, b in bases.items() if b.num_keys}
    assert {r.batch_id for r in rows} == {batch}
    for row in rows:
        kv = inspector.value(row.topic, row.partition, bytes(row.key), batch)
        assert kv.exists and json_text(kv.value) == row.value


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
