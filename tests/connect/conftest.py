"""A Spark Connect server in its own process (``dev.services.connect``) and client sessions to
it: the suite's own classic SparkContext stays in this process, the server's in another."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orderedstream.dev.services.connect import ConnectServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/connect/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.connect)


@pytest.fixture(scope="session")
def connect_server(services_dir: Path, make_kafka: Any, s3: Any) -> Iterator[ConnectServer]:
    """One ``local[2]`` Connect server for the session (after the services: its Python workers
    keep pooled Kafka consumers), with the shared S3's credentials in its environment (where
    ``orderedstream run`` takes them from)."""
    server = ConnectServer(services_dir / "connect", env=s3.aws_env()).start()
    yield server
    server.stop()


@pytest.fixture
def connect(connect_server: ConnectServer) -> Iterator[Any]:
    """A new Spark Connect client session (``pyspark.sql.connect``), stopped after the test."""
    before = {name: os.environ.get(name) for name in _CONNECT_ENV}
    session = connect_server.session()
    try:
        yield session
        for query in session.streams.active:
            query.stop()
        session.stop()
    finally:
        # pyspark marks the whole process as Connect (SPARK_CONNECT_MODE_ENABLED) when a client
        # session is created and keeps the mark after stop(): every later classic DataFrame
        # call of the suite would then take Connect's code paths.
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")


SLOW_WORKER = "Python worker failed to connect back"
"""Spark's fixed wait for a new Python process (the server's ``foreachBatch`` worker) to call
back; on an overloaded machine a cold start can miss it, before the query ran anything."""


def start_query(writer: Any, attempts: int = 3) -> Any:
    """``writer.start()``, again when the server's ``foreachBatch`` worker missed Spark's wait
    for its start (nothing ran: the query never started)."""
    for attempt in range(attempts):
        try:
            return writer.start()
        except Exception as exc:
            if SLOW_WORKER not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
