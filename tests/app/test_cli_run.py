"""``orderedstream run`` end to end as a user runs it (a subprocess on the real services):
a quiet console with named start-up phases, the Prometheus metrics file, and a failure
inside Spark (records deleted from Kafka before the job read them) shown reason first."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
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


def _wait_for(path: Path, name: str, proc: subprocess.Popen[str], timeout: float) -> float:
    """The metric ``name`` of the metrics file once it is > 0 (the run must still be alive)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended early (rc {proc.returncode})"
        if path.exists() and (value := _metric(path.read_text(), name)) > 0:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{name} still 0 after {timeout}s")


# both reach the same shutdown path (core.shutdown); SIGINT's run is slow-marked
@pytest.mark.parametrize("how", [pytest.param("ctrl-c", marks=pytest.mark.slow), "sigterm"])
def test_a_signal_stops_a_running_job_cleanly_and_relative_paths_are_the_cwd_s(
        kafka, s3, tmp_path: Path, how: str) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it: the JVM and the
    Python workers get it too) or SIGTERM to the driver after the first batch: the job stops
    after its running batch, exit 0, nothing lost; local paths relative to the working
    directory are accepted (as Spark resolves them)."""
    prefix = unique("clisig")
    gen = GeneratorOptions(prefix=prefix, sites=1, late_sites=0, partitions=2,
                           sessions_per_site=4, rows=3, updates=10, bad_fraction=0.0, seed=7)
    stats = generate(kafka.bootstrap, gen, create_topic=kafka.create_topic)
    proc = subprocess.Popen(
        [sys.executable, "-m", "orderedstream.app.cli", "run", "--bootstrap-servers",
         kafka.bootstrap, "--output", "out", "--state", "./state", "--checkpoint", "ckpt",
         "--topic-pattern", f"{prefix}-.*", "--trigger", "500ms", "--metrics-file",
         "metrics.prom", "--progress-every", "1", "--master", "local[2]"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **s3.aws_env()}, start_new_session=True)
    try:
        records = _wait_for(tmp_path / "metrics.prom", "orderedstream_records_total", proc, 300)
        assert records == stats.records
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    number = signal.SIGINT if how == "ctrl-c" else signal.SIGTERM
    assert proc.returncode == 0, out[-4000:]
    assert f"[job] signal {int(number)}: stopping after the running batch" in out, out[-4000:]
    assert "orderedstream: " not in out and "Traceback" not in out, out[-4000:]
    assert re.search(r"\[job\] stopped: \d+ batches committed in this run, "
                     rf"{stats.records:,} records, 0 restarts", out), out[-4000:]
    assert {p.name for p in tmp_path.iterdir()} >= {"out", "state", "ckpt"}
    assert (tmp_path / "out" / "_delta_log").is_dir() and any((tmp_path / "state").iterdir())


def test_ctrl_c_while_spark_starts_stops_cleanly_and_leaves_no_jvm(kafka, tmp_path: Path,
                                                                    ) -> None:
    """Ctrl-C during the Spark session's start (a KeyboardInterrupt inside pyspark's gateway
    launch used to end the run with a traceback, exit 130, and leave the driver JVM running):
    the run stops once the session is up, before any query, exit 0, its processes gone."""
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "orderedstream.app.cli", "run", "--bootstrap-servers",
         kafka.bootstrap, "--output", "out", "--state", "state", "--checkpoint", "ckpt",
         "--topic-pattern", f"{unique('cc')}-.*", "--master", "local[2]"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    seen: set[int] = set()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "starting Spark session" in line:
                break
        time.sleep(0.5)  # the gateway is launching: its JVM starts
        seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        while proc.poll() is None:
            try:
                seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        out = "".join(lines) + proc.stdout.read()
        proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-4000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-4000:]
    assert f"[job] signal {int(signal.SIGINT)}: stopping before the query starts" in out, out
    assert "[job] stopped: 0 batches committed in this run" in out, out[-4000:]
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [pid for pid in seen if psutil.pid_exists(pid)]
    assert not left, [psutil.Process(pid).cmdline()[:3] for pid in left if psutil.pid_exists(pid)]
