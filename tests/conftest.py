"""Registers the real-service fixtures and keeps their logs next to failures."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/fixtures.py, tests/helpers

from fixtures import (  # noqa: E402,F401
    cluster_spark,
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


def _terminate(signum: int, _frame: object) -> None:
    # SIGTERM would skip fixture teardown and leave brokers behind: turn it into an exit.
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _terminate)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run cluster tests last, so the local session is switched to the cluster only once."""
    items.sort(key=lambda item: 1 if item.get_closest_marker("cluster") else 0)


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
