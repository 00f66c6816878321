"""Registers the real-service fixtures and keeps their logs next to failures."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
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
    topic,
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# gcsfs's experimental zonal-bucket support probes each bucket over gRPC (TLS), which the GCS
# emulator does not serve: a minute per bucket. Set before gcsfs is imported (docs/storage.md).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
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
#: Folders whose tests start services or processes of their own.
SERVICE_FOLDERS = ("foundation", "chaos", "shim", "job")


def _needs_services(item: pytest.Item) -> bool:
    closure = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    folder = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts[0]
    stores = any(isinstance(v, str) and v in ("s3", "gcs", "azure") for v in params.values())
    return bool(closure & SERVICE_FIXTURES) or stores or folder in SERVICE_FOLDERS


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests that need no service ``unit`` (``scripts/test -m unit``: the fast lane; a
    storage-parametrized test is unit for ``file`` and not for ``s3``), and run cluster tests
    last, so the local session is switched to the cluster only once."""
    for item in items:
        if not _needs_services(item):
            item.add_marker(pytest.mark.unit)
    items.sort(key=lambda item: 1 if item.get_closest_marker("cluster") else 0)


@pytest.fixture(scope="session", autouse=True)
def no_spark_folders_left_in_the_temp_dir() -> Iterator[None]:
    """Spark's JVMs keep their temp folders under the session's tmp_dir; under CI a run that
    leaves ``spark-*`` / ``blockmgr-*`` folders in the system temp dir fails."""
    temp = Path(tempfile.gettempdir())

    def leftovers() -> set[Path]:
        return {*temp.glob("spark-*"), *temp.glob("blockmgr-*")}

    before = leftovers()
    yield
    new = sorted(str(p) for p in leftovers() - before)
    if new and os.environ.get("CI"):
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
