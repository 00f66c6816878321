"""``orderedstream demo`` as a new user runs it: a quiet console, results kept in the work
folder, queries that work after it exited, and a second run that continues (verified)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.app.cli_helpers import run_cli

SMALL = ["--sites", "1", "--partitions", "2", "--sessions", "3", "--rows", "3",
         "--updates", "8", "--max-offsets-per-trigger", "200"]
NOISE = ("py4j.clientserver", "log4j", "ProcessingTimeExecutor", "DAGScheduler", "rdkafka#",
         "WARN ", " INFO ")


def _printed_commands(output: str) -> dict[str, str]:
    """The copy-paste commands the demo printed, by the comment line above each."""
    lines = [line.strip() for line in output.splitlines()]
    found = {}
    for label, line in zip(lines, lines[1:], strict=False):
        if label in ("# DuckDB:", "# Polars:") and not line.startswith("#"):
            found[label.strip("# :")] = line
    return found


def _rocksstate_command(output: str) -> str:
    """The printed ``format("rocksstate")`` command (the line after its comment)."""
    lines = [line.strip() for line in output.splitlines()]
    found = [line for label, line in zip(lines, lines[1:], strict=False)
             if "option batchId=N" in label and not line.startswith("#")]
    assert len(found) == 1, output[-3000:]
    return found[0]


def _state_keys(workdir: Path, command: str) -> str:
    """Run the printed rocksstate command as a user would: ``orderedstream services`` first
    (the state is on the embedded S3), the command in another process, then Ctrl-C."""
    services = subprocess.Popen([sys.executable, "-m", "orderedstream.app.cli", "services",
                                 "--workdir", str(workdir)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        assert services.stdout is not None
        seen = []
        for line in services.stdout:  # blocks until the services print "ready"
            seen.append(line)
            if line.startswith("[services] ready"):
                break
        else:
            raise AssertionError(f"services did not start: {''.join(seen)}")
        done = subprocess.run(shlex.split(command), capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout
    finally:
        services.send_signal(signal.SIGINT)
        services.wait(60)


def test_demo_keeps_its_results_and_continues_verified(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    first = run_cli("demo", "--workdir", str(workdir), *SMALL, timeout=900)
    assert first.returncode == 0, first.stdout[-4000:]
    out = first.stdout
    assert out.splitlines()[0] == f"[demo] starting clean in {workdir}"
    for noise in NOISE:
        assert noise not in out, f"{noise!r} on the console:\n{out}"
    assert "[demo] VERIFIED" in out and "clean start" in out
    assert "rebuilt table" in out
    assert f"orderedstream services --workdir {workdir}" in out
    for name in ("output", "checkpoint", "kafka", "s3", "logs"):
        assert (workdir / name).is_dir(), name
    assert (workdir / "logs" / "run-1.log").stat().st_size > 0

    # the printed queries work after the demo and its services have stopped
    commands = _printed_commands(out)
    assert set(commands) == {"DuckDB", "Polars"}, commands
    counts = {}
    for name, command in commands.items():
        done = subprocess.run(shlex.split(command), capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "change" in done.stdout and "snapshot" in done.stdout, done.stdout
        counts[name] = done.stdout

    # the printed rocksstate command reads the ordered stage's state (embedded S3 restarted)
    state = _state_keys(workdir, _rocksstate_command(out))
    header = [line.replace(" ", "") for line in state.splitlines() if "key_str" in line]
    assert header == ["|topic|partition|key_str|value|"], state
    keys = [line for line in state.splitlines() if line.startswith("|sessions-site00|")
            and "|site00-s" in line and '{"applied":' in line]
    assert keys, state  # a session key and its state (JSON) per row

    second = run_cli("demo", "--workdir", str(workdir), *SMALL, timeout=900)
    assert second.returncode == 0, second.stdout[-4000:]
    assert second.stdout.splitlines()[0].startswith(f"[demo] continuing run 1 in {workdir}")
    assert "[demo] VERIFIED" in second.stdout and "(continued;" in second.stdout
    batches = [line for line in second.stdout.splitlines() if " changes checked " in line]
    first_checked = [line for line in out.splitlines() if " changes checked " in line]
    # the second verification covers both runs' changes: more than the first one checked
    checked = [int(line.split(" changes checked")[0].rsplit(" ", 1)[1])
               for line in (first_checked[0], batches[0])]
    assert checked[1] > checked[0] > 0
    assert (workdir / "logs" / "run-2.log").exists()


def test_services_start_empty_on_a_new_folder_only_when_asked(tmp_path: Path) -> None:
    """``services`` on a folder without demo data is refused (most often a mistyped folder),
    naming ``--new``; with ``--new`` it starts empty services that a client can use."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    workdir = tmp_path / "mine"
    refused = run_cli("services", "--workdir", str(workdir), timeout=60, split=True)
    assert refused.returncode == 2 and "holds no embedded services' data" in refused.stderr
    assert "--new" in refused.stderr and not workdir.exists()
    services = subprocess.Popen([sys.executable, "-m", "orderedstream.app.cli", "services",
                                 "--workdir", str(workdir), "--new"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        assert services.stdout is not None
        seen: list[str] = []
        for line in services.stdout:
            seen.append(line)
            if line.startswith("[services] ready"):
                break
        else:
            raise AssertionError(f"services did not start: {''.join(seen)}")
        assert any("starting empty services (--new)" in line for line in seen), seen
        bootstrap = next(line.rsplit(" ", 1)[-1].strip() for line in seen
                         if line.startswith("[services] Kafka bootstrap servers:"))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("mine", 1, 1)])["mine"].result(60)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("mine", b"hello")
        assert producer.flush(30) == 0  # the broker took the record
    finally:
        services.send_signal(signal.SIGINT)
        assert services.wait(60) == 0
    assert (workdir / "kafka").is_dir() and (workdir / "s3").is_dir()
