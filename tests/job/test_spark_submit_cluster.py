"""The main job submitted with spark-submit to the standalone cluster (master + 2 workers, one
1-core executor each), in a plain session (none of the embedded session's tuning, the process
tuning off): every generated record in the Delta output exactly once, in order per session;
then the user's own script on the same cluster reads the state (``rocksstate``), copies the
topics to ``fencedparquet``, and every batch replays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orderedstream.app import submit
from orderedstream.core.jvm import bundled_jar
from orderedstream.dev.services.spark import spark_home
from orderedstream.sinks.deltalog import table_format
from tests.job.plainjob import (
    assert_exactly_once,
    assert_plain_features,
    small_job,
    users_shell_env,
)

pytestmark = pytest.mark.cluster

def test_the_script_path_is_printed_for_spark_submit() -> None:
    printed = subprocess.run([sys.executable, "-m", "orderedstream.app.submit"], check=True,
                             capture_output=True, text=True).stdout.strip()
    assert Path(printed) == Path(submit.__file__).resolve()


def test_spark_submit_runs_the_main_job_exactly_once_in_a_plain_session(
        spark_sessions: Any, spark_cluster: Any, kafka: Any, s3: Any, tmp_path: Path) -> None:
    spark_sessions.close_session()  # the cluster's two cores go to the submitted application
    opts, generated = small_job(kafka, s3, tmp_path, "submitjob", seed=21)
    aws = s3.aws_env()
    conf = {"spark.pyspark.python": sys.executable, "spark.executor.cores": "1",
            "spark.cores.max": "2", "spark.executor.memory": "1g",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            **{f"spark.executorEnv.{k}": v for k, v in aws.items()}}
    argv = [str(spark_home() / "bin" / "spark-submit"), "--master", spark_cluster.url,
            *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]]
    jar = bundled_jar()
    if jar is not None:  # the shim's placement, as a user adds it
        argv += ["--jars", str(jar)]
    argv += [str(Path(submit.__file__).resolve()), "run",
             "--bootstrap-servers", kafka.bootstrap, "--topic-pattern", opts.topic_pattern,
             "--output", opts.output, "--state", opts.state_location,
             "--checkpoint", opts.checkpoint, "--s3-endpoint", s3.endpoint,
             "--available-now", "--max-offsets-per-trigger", "60", "--progress-every", "5"]
    executor_logs = Path(spark_cluster.workdir).glob("work-*/app-*/*/stderr")
    before = set(executor_logs)
    env = users_shell_env(**aws, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=540, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "[job] stopped:" in proc.stdout, proc.stdout[-4000:]

    assert_exactly_once(opts, generated)
    assert table_format(opts.output, s3.storage_options) == "delta"
    # the application ran on the cluster's executors (a log folder per executor)
    started = set(Path(spark_cluster.workdir).glob("work-*/app-*/*/stderr")) - before
    assert len(started) >= 2, started

    # the user's own script after it, on the same cluster: rocksstate, fencedparquet, replay
    assert_plain_features(argv[:argv.index(str(Path(submit.__file__).resolve()))], env,
                          kafka=kafka, s3=s3, opts=opts, generated=generated,
                          tmp_path=tmp_path)
