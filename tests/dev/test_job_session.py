"""The main job's session settings reach the processes they are for: ``JOB_ENVIRONMENT`` the
driver JVM and the Python workers it starts (not the driver's own environment, and not over
a value the user set), ``JOB_CONF`` the session (its plans without generated code), its Unix
sockets in a folder whose paths fit (the session below runs from pytest's deep temporary
folder). Each case runs in its own interpreter: the tests' shared session has its JVM
already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orderedstream.dev.local.settings import (
    JOB_CONF,
    JOB_ENVIRONMENT,
    UNIX_SOCKET_DIR,
    UNIX_SOCKETS,
    unix_sockets,
)

SCRIPT = r"""
import json, os, sys
from orderedstream.dev.local.settings import JOB_CONF, JOB_ENVIRONMENT
from orderedstream.dev.services.spark import local_spark_session

spark = local_spark_session("job-session-test", tmp_dir=sys.argv[1], conf=JOB_CONF,
                            environment=JOB_ENVIRONMENT)
names = sorted(JOB_ENVIRONMENT)

def probe(batches):
    import pyarrow as pa
    for batch in batches:
        seen = {k: os.environ.get(k) for k in names}
        yield pa.RecordBatch.from_pydict({"env": [json.dumps(seen)] * batch.num_rows,
                                          "pool": [pa.default_memory_pool().backend_name]
                                          * batch.num_rows})

frame = spark.range(2).repartition(2).mapInArrow(probe, "env string, pool string")
rows = frame.collect()
sqlconf = spark._jvm.org.apache.spark.sql.internal.SQLConf
print("RESULT " + json.dumps({
    "plan": frame._jdf.queryExecution().executedPlan().toString(),
    "factory_mode_key": sqlconf.CODEGEN_FACTORY_MODE().key(),
    "workers": sorted({r.env for r in rows}), "pools": sorted({r.pool for r in rows}),
    "driver": {k: os.environ.get(k) for k in names},
    "conf": {k: spark.conf.get(k) for k in JOB_CONF}}))
spark.stop()
"""


def _run(tmp_path: Path, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in JOB_ENVIRONMENT}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "spark")],
                          env={**clean, **env}, capture_output=True, text=True, timeout=300,
                          check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(lines[-1][len("RESULT "):])
    return result


def test_job_environment_reaches_the_workers_not_the_driver_and_job_conf_the_session(
        tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result["workers"] == [json.dumps(dict(sorted(JOB_ENVIRONMENT.items())))]
    assert result["pools"] == ["system"]  # Arrow's pool in the workers
    assert result["driver"] == {k: None for k in sorted(JOB_ENVIRONMENT)}  # restored
    assert result["conf"] == JOB_CONF
    # No generated code (JOB_CONF's docstring): the internal factoryMode setting still exists in
    # this Spark, and the plan has no whole-stage codegen (its operators print as "*(1) ...").
    assert result["factory_mode_key"] == "spark.sql.codegen.factoryMode"
    plan = str(result["plan"])
    assert "MapInArrow" in plan and "*(" not in plan and "WholeStageCodegen" not in plan, plan


def test_a_users_own_setting_wins(tmp_path: Path) -> None:
    result = _run(tmp_path, MALLOC_ARENA_MAX="4")
    workers = result["workers"]
    assert isinstance(workers, list) and len(workers) == 1
    seen = json.loads(workers[0])
    assert seen == {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "4"}
    assert result["driver"] == {"ARROW_DEFAULT_MEMORY_POOL": None, "MALLOC_ARENA_MAX": "4"}


def test_unix_sockets_get_a_short_private_folder_on_local_masters_only() -> None:
    local = {UNIX_SOCKETS: "true"}
    unix_sockets(local, "local[2,4]")
    folder = Path(local[UNIX_SOCKET_DIR])
    assert local[UNIX_SOCKETS] == "true" and folder.is_dir()
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)  # the session's alone
    assert len(f"{folder}/.{'0' * 8}-0000-0000-0000-{'0' * 12}.sock") <= 107
    cluster = {UNIX_SOCKETS: "true"}  # executors elsewhere have no such folder: TCP
    unix_sockets(cluster, "spark://host:7077")
    assert cluster[UNIX_SOCKETS] == "false" and UNIX_SOCKET_DIR not in cluster
    chosen = {UNIX_SOCKETS: "true", UNIX_SOCKET_DIR: "/run/spark"}  # the user's folder stands
    unix_sockets(chosen, "local[2]")
    assert chosen == {UNIX_SOCKETS: "true", UNIX_SOCKET_DIR: "/run/spark"}
    off: dict[str, str] = {}
    unix_sockets(off, "local[2]")
    assert off == {}
