"""``orderedstream run`` end to end as a user runs it (a subprocess on the real services):
a quiet console with named start-up phases, the Prometheus metrics file, and a failure
inside Spark (records deleted from Kafka before the job read them) shown reason first."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from orderedstream.app.job.generator import GeneratorOptions, generate
from tests.app.cli_helpers import assert_reason_first, run_cli
from tests.fixtures import unique

NOISE = ("py4j.clientserver", "log4j", "ProcessingTimeExecutor", "DAGScheduler", "rdkafka#",
         "WARN ", "INFO ")


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from:\n{text}"
    return float(match.group(1))


def test_run_is_quiet_writes_metrics_and_shows_a_state_failure_reason_first(
        kafka, s3, tmp_path: Path) -> None:
    prefix = unique("clirun")
    gen = GeneratorOptions(prefix=prefix, sites=1, late_sites=0, partitions=2,
                           sessions_per_site=4, rows=3, updates=10, bad_fraction=0.0, seed=3)
    first = generate(kafka.bootstrap, gen, create_topic=kafka.create_topic)
    state = s3.url(unique("clistate"), "state")
    metrics, log = tmp_path / "metrics.prom", tmp_path / "run.log"
    args = ["run", "--bootstrap-servers", kafka.bootstrap, "--output", str(tmp_path / "out"),
            "--state", state, "--checkpoint", str(tmp_path / "ckpt"),
            "--topic-pattern", f"{prefix}-.*", "--s3-endpoint", s3.endpoint,
            "--available-now", "--metrics-file", str(metrics), "--log-file", str(log),
            "--progress-every", "2", "--master", "local[2]"]
    ok = run_cli(*args, env=s3.aws_env())
    assert ok.returncode == 0, ok.stdout[-4000:]
    # quiet: the pack's lines only; Spark, py4j and librdkafka went to the log file
    for noise in NOISE:
        assert noise not in ok.stdout, f"{noise!r} on the console:\n{ok.stdout}"
    assert all(line.startswith("[job]") for line in ok.stdout.splitlines()), ok.stdout
    assert "[job] starting Spark session" in ok.stdout
    assert "first plan" in ok.stdout
    assert log.stat().st_size > 0
    # the metrics file: Prometheus text, the batch's figures
    text = metrics.read_text()
    assert "# TYPE orderedstream_records_total counter" in text
    assert _metric(text, "orderedstream_records_total") == first.records
    assert _metric(text, "orderedstream_batches_total") >= 1
    assert _metric(text, "orderedstream_output_rows_total") > 0
    assert _metric(text, "orderedstream_output_files_total") > 0
    assert _metric(text, "orderedstream_state_bytes") > 0
    assert not list(tmp_path.glob(".metrics.prom.*"))  # replaced atomically, no leftovers

    # records the job has not read yet deleted from Kafka (retention would do the same): the
    # next run's source refuses the gap (integrity strict) inside Spark; reason first
    second = generate(kafka.bootstrap, GeneratorOptions(
        prefix=prefix, sites=1, late_sites=0, partitions=2, sessions_per_site=4, rows=3,
        updates=10, bad_fraction=0.0, seed=4, session_tag="w1"))
    assert second.records > 0
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": unique("wm")})
    topic = second.topics[0]
    cut = []
    for partition in range(2):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        cut.append(TopicPartition(topic, partition, high))
    consumer.close()
    for future in admin.delete_records(cut).values():
        future.result(30)
    del admin  # its client would outlive the broker in a failure's traceback (noise at exit)
    failed = run_cli(*args, "--max-restarts", "0", env=s3.aws_env())
    # stdout and stderr merged, as a terminal shows them: the progress lines, then the failure
    # report, whose first line is the pack's sentence; Spark's report is in the log file
    out = failed.stdout
    assert failed.returncode == 1, out[-4000:]
    start = out.find("orderedstream: DataLossError: ")
    assert start > 0, out[-4000:]
    progress, report = out[:start], out[start:]
    assert all(line.startswith("[job]") for line in progress.splitlines()), progress
    assert_reason_first(_with_stdout(failed, report), "DataLossError", topic, "is gone")
    assert f"(Spark's full report: {log}" in report.splitlines()[1], report[:600]
    for spark_text in ("STREAM_FAILED", "PYTHON_", "SQLSTATE", "Traceback", *NOISE):
        assert spark_text not in out, f"{spark_text!r} on the console:\n{out[-4000:]}"
    assert report.index("DataLossError") < report.index("[job] stopped:")
    # Spark's report (its wrappers and the worker's trace) follows the reason in the log file
    logged = log.read_text()
    reason = logged.rindex("orderedstream: DataLossError")
    assert reason < logged.index("--- Spark's report", reason) < logged.index("SQLSTATE", reason)
    assert out.startswith("[job] checked")


def _with_stdout(result: subprocess.CompletedProcess[str], text: str
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(result.args, result.returncode, text, result.stderr)
