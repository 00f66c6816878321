"""``orderedstream run --master local[2]``: a plain local session, as on a cluster (none of the
embedded session's tuning, the process tuning off, the user's own Spark configuration); every
generated record in the Delta output exactly once, in order per session; then the user's own
script in the same kind of session reads the state (``rocksstate``), copies the topics to
``fencedparquet``, and every batch replays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from orderedstream.core import tuning
from orderedstream.dev.local.settings import JOB_CONF
from tests.job.plainjob import (
    assert_exactly_once,
    assert_plain_features,
    small_job,
    users_shell_env,
)


def _spark_properties(events: Path) -> dict[str, str]:
    """The application's Spark properties, from its event log's environment update."""
    logs = sorted(events.rglob("events_*"))  # Spark 4 rolls its event log: a folder of files
    assert logs, f"no event log under {events}"
    for line in logs[0].read_text().splitlines():
        event = json.loads(line)
        if event.get("Event") == "SparkListenerEnvironmentUpdate":
            props = event["Spark Properties"]
            return dict(props) if isinstance(props, dict) else {k: v for k, v in props}
    raise AssertionError(f"no environment update in {logs[0]}")


def test_run_on_a_local_master_is_a_plain_session_and_writes_exactly_once(
        kafka: Any, s3: Any, tmp_path: Path) -> None:
    opts, generated = small_job(kafka, s3, tmp_path, "plainrun", seed=23)
    events = tmp_path / "events"
    events.mkdir()
    # the user's configuration, as a user gives it to a session pyspark starts
    user_conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                 "spark.eventLog.compress": "false", "spark.sql.shuffle.partitions": "2"}
    env = users_shell_env(**s3.aws_env(), PYSPARK_SUBMIT_ARGS=" ".join(
        f"--conf {k}={v}" for k, v in user_conf.items()) + " pyspark-shell")
    proc = subprocess.run(
        [sys.executable, "-m", "orderedstream.app.cli", "run", "--master", "local[2]",
         "--bootstrap-servers", kafka.bootstrap, "--topic-pattern", opts.topic_pattern,
         "--output", opts.output, "--state", opts.state_location,
         "--checkpoint", opts.checkpoint, "--s3-endpoint", s3.endpoint, "--available-now",
         "--max-offsets-per-trigger", "60", "--progress-every", "5",
         "--log-file", str(tmp_path / "run.log")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=540, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "[job] stopped:" in proc.stdout, proc.stdout[-4000:]

    assert_exactly_once(opts, generated)

    props = _spark_properties(events)
    assert props["spark.master"] == "local[2]"
    assert props["spark.sql.shuffle.partitions"] == "2"  # the user's setting reached it
    embedded = {k: props[k] for k in JOB_CONF if k in props}
    assert not embedded, f"the embedded session's settings in a plain session: {embedded}"
    assert props.get("spark.sql.adaptive.enabled", "true") == "true"
    assert "spark.python.daemon.module" not in props  # pyspark's daemon, not the pack's
    assert "spark.jars" not in props  # no shim jar the user did not give
    java = props.get("spark.driver.extraJavaOptions", "")
    assert "SharedArchiveFile" not in java and "TieredStopAtLevel" not in java, java
    # Python workers run this interpreter, not a fork server's launcher
    assert props.get("spark.pyspark.python", sys.executable) == sys.executable
    assert not any(k.startswith("spark.executorEnv.") and tuning.ENV in k for k in props)

    # the user's own script after it, in the same plain local session
    plain = users_shell_env(**s3.aws_env(), PYSPARK_PYTHON=sys.executable,
                            PYSPARK_SUBMIT_ARGS="--master local[2] pyspark-shell")
    assert_plain_features([sys.executable], plain, kafka=kafka, s3=s3, opts=opts,
                          generated=generated, tmp_path=tmp_path)
