"""How long ``orderedstream run --available-now`` takes from its ``[job] stopped`` line to the
end of its process (and of every process holding its output).

Usage (one at a time under the benchmark lock):
    flock /tmp/orderedstream-bench.lock .venv/bin/python \
        benchmarks/results/20261129-s33/exit_timing.py WORKDIR [RUNS] [--phases]

Starts a local Kafka and S3 (``embedded_services``) in WORKDIR, writes 1,042 capture-session
records into two topics, then runs the job RUNS times (default 3), each with its own output,
state and checkpoint (so each is one batch over the same records). Each output line is printed
with its time since the run's start; a ``RUN`` line gives ``stopped``, ``driver_exit`` and
``exit`` (its output's end) and ``stop->exit``. With ``--phases`` the CLI runs through a
wrapper that also prints (``@@``) when ``spark.stop()`` begins and returns, when ``main``
returns and when the exit handlers start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.app.run_cli import create_topic_fn
from orderedstream.dev.services.embedded import embedded_services

WRAPPER = r"""
import atexit, sys, time
T0 = time.monotonic()
def say(what):
    print(f"@@ {time.monotonic() - T0:6.2f} {what}", flush=True)
import orderedstream.app.run_cli as run_cli
original = run_cli.start_spark
def start_spark(*args, **kwargs):
    spark = original(*args, **kwargs)
    stop = spark.stop
    def timed_stop():
        say("spark.stop begins"); stop(); say("spark.stop returned")
    spark.stop = timed_stop
    return spark
run_cli.start_spark = start_spark
atexit.register(lambda: say("exit handlers (this one registered first)"))
from orderedstream.app.cli import main
sys.argv = ["orderedstream", *sys.argv[1:]]
code = main()
say(f"main returned {code}")
sys.exit(code)
"""


def run_once(index: int, work: Path, bootstrap: str, endpoint: str | None,
             env: dict[str, str], phases: bool) -> None:
    head = [sys.executable, "-c", WRAPPER] if phases else [sys.executable, "-m",
                                                           "orderedstream.app.cli"]
    command = [*head, "run", "--bootstrap-servers", bootstrap,
               "--output", f"s3://lake/out{index}", "--state", f"s3://lake/state{index}",
               "--checkpoint", str(work / f"checkpoint{index}"), "--available-now",
               "--progress-every", "1"]
    if endpoint:
        command += ["--s3-endpoint", endpoint]
    began = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    marks: dict[str, float] = {}

    def wait_driver() -> None:
        proc.wait()
        marks["driver_exit"] = time.monotonic() - began

    threading.Thread(target=wait_driver, daemon=True).start()
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic() - began
        if line.startswith("%"):  # librdkafka's own lines
            continue
        print(f"{now:7.2f} {line.rstrip()[:160]}")
        if "[job] stopped" in line:
            marks["stopped"] = now
    proc.wait()
    marks["exit"] = time.monotonic() - began
    gap = marks["exit"] - marks.get("stopped", 0.0)
    print("RUN", index, {k: round(v, 2) for k, v in marks.items()}, "rc", proc.returncode,
          "stop->exit", round(gap, 2), flush=True)


def main(argv: list[str]) -> None:
    phases = "--phases" in argv
    rest = [a for a in argv if a != "--phases"]
    work, runs = Path(rest[0]), int(rest[1]) if len(rest) > 1 else 3
    with embedded_services(workdir=work) as services:
        generate(services.bootstrap,
                 GeneratorOptions(sites=2, late_sites=0, sessions_per_site=10),
                 create_topic=create_topic_fn(services.bootstrap))
        options = services.storage_options
        env = dict(os.environ)
        if options.get("key"):
            env["AWS_ACCESS_KEY_ID"] = options["key"]
            env["AWS_SECRET_ACCESS_KEY"] = options["secret"]
        for index in range(runs):
            run_once(index, work, services.bootstrap, services.s3_endpoint, env, phases)


if __name__ == "__main__":
    main(sys.argv[1:])
