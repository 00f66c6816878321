"""The main job's session with the fork server (``orderedstream.dev.local.forkserver``), as
``orderedstream run`` starts it: Spark's planner daemons and the streaming source runner are
forked from the server, the job reads every record and commits, the server is stopped once the
first batch runs, and a second query in the same session (a restart) works without it. Real
Kafka, S3 and Spark, in a fresh interpreter (the tests' shared session has its JVM already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.dev.local import forkserver
from tests.fixtures import unique

SCRIPT = r"""
import json, sys
from orderedstream.app.job.pipeline import (JobOptions, committed_offsets, kafka_end_offsets,
                                            start_job)
from orderedstream.dev.local import forkserver
from orderedstream.dev.local.settings import JOB_CONF, JOB_ENVIRONMENT
from orderedstream.dev.services.spark import local_spark_session

args = json.loads(sys.argv[1])
spark = local_spark_session("forkserver-job-test", tmp_dir=args["tmp"], conf=JOB_CONF,
                            environment=JOB_ENVIRONMENT, fork_server=True)
server = forkserver._servers[0]
report = {"launcher": spark.conf.get("spark.pyspark.python") == server.launcher}
for run in ("first", "restart"):
    if run == "restart":  # more records, for a batch of the restarted query
        from orderedstream.app.job.generator import GeneratorOptions, generate
        generate(args["bootstrap"], GeneratorOptions(**args["wave"], seed=6, session_tag="b"))
    end = kafka_end_offsets(args["bootstrap"], args["pattern"])
    opts = JobOptions(bootstrap=args["bootstrap"], output=args["output"],
                      state_location=args["state"], checkpoint=args["checkpoint"],
                      topic_pattern=args["pattern"], storage_options=args["storage"])
    query, _ = start_job(spark, opts, once=True)
    query.awaitTermination(240)
    log = (server.folder / "forkserver.log").read_text()
    report[run] = {"committed": committed_offsets(query) == end,
                   "error": str(query.exception()) if query.exception() else None,
                   "forking": (server.folder / "fork.sock").exists(),
                   "forked": log.count("forked")}
report["log"] = log
report["retired"] = "--reap" in open(f"/proc/{server.process.pid}/cmdline", "rb").read().decode()
spark.stop()
print("RESULT " + json.dumps(report))
"""


# Slow: on a loaded machine Spark may start one of its Python processes before the server
# answers (it then runs cold, as designed); the server's own tests in tests/dev stay in CI.
@pytest.mark.slow
def test_the_job_forks_sparks_python_processes_and_stops_the_server_at_its_first_batch(
        kafka: Any, s3: Any, tmp_path: Path) -> None:
    prefix = unique("forkjob")
    wave = {"prefix": prefix, "sites": 1, "late_sites": 0, "partitions": 2,
            "sessions_per_site": 3, "rows": 3, "updates": 5}
    generate(kafka.bootstrap, GeneratorOptions(**wave, seed=5),  # type: ignore[arg-type]
             create_topic=kafka.create_topic)
    base = s3.url(unique("forkjob"))
    args = {"tmp": str(tmp_path / "spark"), "bootstrap": kafka.bootstrap,
            "pattern": f"{prefix}-.*", "output": f"{base}/output", "state": f"{base}/state",
            "checkpoint": str(tmp_path / "checkpoint"), "storage": s3.storage_options,
            "wave": wave}
    env = {k: v for k, v in os.environ.items() if k != forkserver.DISABLE_ENV}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(args)], env=env,
                          capture_output=True, text=True, timeout=420, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    report = json.loads(lines[-1][len("RESULT "):])
    assert report["launcher"] is True
    first, restart = report["first"], report["restart"]
    assert (first["committed"], first["error"], first["forking"]) == (True, None, False)
    # the restart in the same session: the launcher started the interpreter itself
    assert (restart["committed"], restart["error"], restart["forking"]) == (True, None, False)
    assert restart["forked"] == first["forked"] >= 3
    assert report["retired"] is True  # a few-MiB reaper now, until the driver ends
    forked = [line for line in report["log"].splitlines() if "forked" in line]
    routed = " ".join(forked)
    assert "-m pyspark.daemon pyspark.sql.worker.lookup_data_sources" in routed, report["log"]
    assert "-m pyspark.daemon pyspark.sql.worker.create_data_source" in routed, report["log"]
    assert "-m pyspark.sql.streaming.python_streaming_source_runner" in routed, report["log"]
    assert "not preloaded" not in report["log"], report["log"]
    assert "refused" not in report["log"], report["log"]
