"""Registers the real-service fixtures and keeps their logs next to failures."""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import (  # noqa: F401
    azurite,
    cluster_spark,
    gcs,
    kafka,
    make_kafka,
    make_s3,
    s3,
    s3_url,
    services_dir,
    spark,
    spark_cluster,
    spark_sessions,
    target,
    topic,
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Azure credentials come from the environment, in the tests as in production: Azurite's
# well-known development account, set before any Spark JVM (and so its Python workers) starts.
os.environ["AZURE_STORAGE_ACCOUNT_NAME"] = "devstoreaccount1"
os.environ["AZURE_STORAGE_ACCOUNT_KEY"] = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
    "KBHBeksoGMGw==")
# The suite runs the pack as the embedded local session does, process tuning on (the tests'
# sessions and every Python worker they start inherit it; the standalone cluster's executors
# get it from the session's spark.executorEnv). Tests of the plain path remove it
# (tests/core/test_tuning.py, tests/job/test_spark_submit_cluster.py).
os.environ.setdefault("ORDEREDSTREAM_PROCESS_TUNING", "1")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Every JVM the suite starts (Kafka, Spark drivers, executors, cluster daemons, the chaos
    job) keeps java.io.tmpdir under pytest's base temp dir, not in the system temp dir."""
    if hasattr(config, "workerinput"):
        return
    jvm_tmp = config._tmp_path_factory.getbasetemp() / "jvm-tmp"  # type: ignore[attr-defined]
    jvm_tmp.mkdir(parents=True, exist_ok=True)
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join(
        filter(None, [os.environ.get("JAVA_TOOL_OPTIONS"), f"-Djava.io.tmpdir={jvm_tmp}"]))


def _terminate(signum: int, _frame: object) -> None:
    # SIGTERM would skip fixture teardown and leave brokers behind: turn it into an exit.
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _terminate)


#: Fixtures that start a service (Kafka, S3, Spark) or build the shim with Maven.
SERVICE_FIXTURES = frozenset({"kafka", "make_kafka", "s3", "make_s3", "s3_url", "s3_table", "topic",
                              "gcs", "azurite",
                              "spark", "spark_sessions", "spark_cluster", "cluster_spark",
                              "services_dir", "shim_jar"})
#: Folders (and top-level modules) whose tests start services or processes of their own.
SERVICE_FOLDERS = ("dev", "chaos", "shim", "job", "test_docs_examples.py")
#: Single modules (paths under ``tests/``) that start services through a subprocess.
SERVICE_MODULES = frozenset({"benchmarks/test_cases_tiny.py"})


def _needs_services(item: pytest.Item) -> bool:
    closure = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    relative = Path(str(item.fspath)).relative_to(Path(__file__).parent)
    stores = any(isinstance(v, str) and v in ("s3", "gcs", "azure") for v in params.values())
    return (bool(closure & SERVICE_FIXTURES) or stores or relative.parts[0] in SERVICE_FOLDERS
            or relative.as_posix() in SERVICE_MODULES)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests that need no service ``unit`` (``scripts/test -m unit``: the fast lane; a
    storage-parametrized test is unit for ``file`` and not for ``s3``), and run cluster tests
    last, so the local session is switched to the cluster only once."""
    for item in items:
        if not _needs_services(item):
            item.add_marker(pytest.mark.unit)
    items.sort(key=lambda item: 1 if item.get_closest_marker("cluster") else 0)


#: The folders Spark's JVMs make in ``java.io.tmpdir``: ``spark-<uuid>`` and ``blockmgr-<uuid>``
#: (not, say, a ``spark-warehouse`` folder a session made in its working directory).
_SPARK_TEMP = re.compile(r"(spark|blockmgr)-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
_JAVA_OPTION_VARS = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")


def _spark_temp_folders(temp: Path) -> set[Path]:
    return {p for p in temp.iterdir() if _SPARK_TEMP.fullmatch(p.name) and p.is_dir()}


def _other_jvms_on(temp: Path) -> list[int]:
    """Live JVMs outside this run (not this process's children) whose ``java.io.tmpdir`` is
    ``temp``: what they make there cannot be told from what this run made."""
    import psutil

    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.pid in mine or not cmdline or not Path(cmdline[0]).name.startswith("java"):
            continue
        try:
            env = proc.environ()
        except psutil.Error:
            env = {}
        words = [w for var in _JAVA_OPTION_VARS for w in env.get(var, "").split()] + cmdline
        chosen = [w.split("=", 1)[1] for w in words if w.startswith("-Djava.io.tmpdir=")]
        where = Path(chosen[-1]) if chosen else temp
        if where.resolve() == temp.resolve():
            found.append(proc.pid)
    return found


@pytest.fixture(scope="session", autouse=True)
def no_spark_folders_left_in_the_temp_dir() -> Iterator[None]:
    """Every JVM the run starts keeps its temp folders under pytest's base temp dir (see
    ``pytest_configure``); under CI a run that leaves Spark temp folders in the system temp
    dir fails. Only folders this run made count: ones there before it began do not, nor, when
    another JVM on the machine (not this run's) uses that dir, the new ones (a warning)."""
    temp = Path(tempfile.gettempdir())
    before = _spark_temp_folders(temp)
    others = set(_other_jvms_on(temp))
    yield
    new = sorted(str(p) for p in _spark_temp_folders(temp) - before)
    if not new or not os.environ.get("CI"):
        return
    others |= set(_other_jvms_on(temp))
    if others:
        warnings.warn(f"Spark temp folders appeared in {temp} ({new[:10]}) while JVMs outside "
                      f"this run (pids {sorted(others)[:10]}) use it: not counted", stacklevel=1)
        return
    pytest.fail(f"the test run left Spark temp folders in {temp}: {new[:10]}")


def _close_pooled_consumers() -> None:
    """Close this process's pooled Kafka consumers (in-process reads keep them for reuse)
    while their brokers still answer: left open past the brokers' teardown, librdkafka prints
    ``%3|...|FAIL|... Connection refused`` lines until the interpreter exits."""
    from orderedstream.python_datasource.consumer_pool import POOL

    POOL.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
                         ) -> Iterator[None]:
    """Finalizers run last-in first-out: one added after ``make_kafka``'s own teardown was
    registered runs before the brokers are killed."""
    yield
    if fixturedef.argname == "make_kafka":
        fixturedef.addfinalizer(_close_pooled_consumers)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for name in ("kafka", "s3"):
        service = item.funcargs.get(name) if hasattr(item, "funcargs") else None
        log = getattr(service, "log_path", None)
        if log is not None and Path(log).exists():
            tail = "\n".join(Path(log).read_text(errors="replace").splitlines()[-40:])
            report.sections.append((f"{name} log ({log})", tail))
