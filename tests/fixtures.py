"""Fixtures that start real services on loopback: Kafka (KRaft), S3 (SeaweedFS), Spark.

Shared services are session-scoped; a test that stops, kills or restarts a service asks for a
private one from the ``make_kafka`` / ``make_s3`` factories instead, so it disturbs nobody.
Logs stay under pytest's base temp dir; a failing test gets their tails in its report.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orderedstream.core.shutdown import stop_session
from orderedstream.dev.services.azurite import AzuriteServer
from orderedstream.dev.services.gcs import GCSServer
from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.dev.services.s3 import S3Server
from orderedstream.dev.services.spark import SparkStandaloneCluster, local_spark_session
from orderedstream.python_datasource.consumer_pool import POOL

_counter = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test uses (topics, buckets prefixes, checkpoint dirs)."""
    return f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("services")


@pytest.fixture(scope="session")
def make_kafka(services_dir: Path) -> Iterator[Callable[..., KafkaBroker]]:
    """Factory: start a private broker (``overrides`` are server.properties entries)."""
    started: list[KafkaBroker] = []

    def factory(**overrides: str) -> KafkaBroker:
        broker = KafkaBroker(services_dir / unique("kafka"), overrides=overrides).start()
        started.append(broker)
        return broker

    yield factory
    # consumers this process keeps between reads would retry the stopped brokers at exit,
    # logging a connection error each
    POOL.clear()
    for broker in started:
        broker.kill()


@pytest.fixture(scope="session")
def kafka(make_kafka: Callable[..., KafkaBroker]) -> KafkaBroker:
    """The shared broker: create your own topics with ``unique`` names; never stop it."""
    return make_kafka()


@pytest.fixture(scope="session")
def make_s3(services_dir: Path) -> Iterator[Callable[..., S3Server]]:
    """Factory: start a private SeaweedFS S3 server with one bucket."""
    started: list[S3Server] = []

    def factory(bucket: str = "lake") -> S3Server:
        server = S3Server(services_dir / unique("s3"), bucket=bucket).start()
        started.append(server)
        return server

    yield factory
    for server in started:
        server.kill()


@pytest.fixture(scope="session")
def s3(make_s3: Callable[..., S3Server]) -> S3Server:
    """The shared S3 endpoint: write under ``s3.url(unique(...))``; never stop it."""
    return make_s3()


@pytest.fixture
def s3_url(s3: S3Server) -> str:
    """A fresh ``s3://lake/<unique>`` prefix for one test."""
    return s3.url(unique("t"))


@pytest.fixture(scope="session")
def gcs(services_dir: Path) -> Iterator[GCSServer]:
    """The shared Google Cloud Storage emulator (fake-gcs-server); write under
    ``gcs.url(unique(...))``."""
    server = GCSServer(services_dir / unique("gcs")).start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def azurite(services_dir: Path) -> Iterator[AzuriteServer]:
    """The shared Azure Blob emulator (Azurite), its account's variables in this process's
    environment (credentials come from the environment, as in production)."""
    server = AzuriteServer(services_dir / unique("azurite")).start()
    saved = {name: os.environ.get(name) for name in server.azure_env()}
    os.environ.update(server.azure_env())
    yield server
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.kill()


@pytest.fixture
def topic(kafka: KafkaBroker) -> Callable[..., str]:
    """Factory: create a fresh topic on the shared broker and return its name."""

    def factory(partitions: int = 1, prefix: str = "topic", **config: str) -> str:
        name = unique(prefix)
        kafka.create_topic(name, partitions, {k.replace("_", "."): v for k, v in config.items()})
        return name

    return factory


def _s3a_jars_conf() -> dict[str, str]:
    """hadoop-aws on the local session's classpath, so tests can ``spark.read`` ``s3a://``
    (endpoint settings go on the running session's hadoopConfiguration, see
    ``orderedstream.dev.services.spark.s3a_conf``). Without Maven the session starts without
    them."""
    from orderedstream.core.errors import ServiceError
    from orderedstream.dev.services.jars import hadoop_aws_jars

    try:
        return {"spark.jars": ",".join(hadoop_aws_jars())}
    except ServiceError:
        return {}


class SparkSessions:
    """At most one SparkContext per process: switch between local[2] and the cluster lazily."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mode: str | None = None
        self.session: Any = None
        self.cluster: SparkStandaloneCluster | None = None

    def get(self, mode: str) -> Any:
        if self.mode == mode and self.session is not None:
            return self.session
        self.close_session()
        if mode == "local":
            self.session = local_spark_session("orderedstream-tests", tmp_dir=self.root / "local",
                                               conf=_s3a_jars_conf())
        else:
            if self.cluster is None:
                self.cluster = SparkStandaloneCluster(self.root / "cluster").start()
            self.session = self.cluster.session("orderedstream-cluster-tests")
        self.mode = mode
        return self.session

    def close_session(self) -> None:
        if self.session is not None:
            for query in self.session.streams.active:
                query.stop()
            stop_session(self.session)  # the accumulator server's shutdown: in the background
            from pyspark import SparkContext

            SparkContext._gateway = None  # a fresh JVM for the next mode
            SparkContext._jvm = None
        self.session = None
        self.mode = None

    def close(self) -> None:
        self.close_session()
        if self.cluster is not None:
            self.cluster.stop()


@pytest.fixture(scope="session")
def spark_sessions(services_dir: Path, make_kafka: Any, make_s3: Any) -> Iterator[SparkSessions]:
    """Depends on the service factories so that it is torn down before them: Spark's Python
    workers keep pooled Kafka consumers, which print librdkafka's ``Connection refused`` lines
    until they exit if the brokers are killed first."""
    sessions = SparkSessions(services_dir / "spark")
    yield sessions
    sessions.close()


@pytest.fixture
def spark(spark_sessions: SparkSessions) -> Any:
    """A local[2] SparkSession whose Python workers run this venv's interpreter."""
    return spark_sessions.get("local")


@pytest.fixture
def spark_cluster(spark_sessions: SparkSessions) -> SparkStandaloneCluster:
    """The standalone cluster (master + 2 workers of 1 core); started on first use."""
    spark_sessions.get("cluster")
    assert spark_sessions.cluster is not None
    return spark_sessions.cluster


@pytest.fixture
def cluster_spark(spark_sessions: SparkSessions) -> Any:
    """A SparkSession on the standalone cluster: tasks run in two executor JVMs."""
    return spark_sessions.get("cluster")


@pytest.fixture(params=["local", "s3", "azure"])
def target(request: pytest.FixtureRequest, tmp_path: Path
           ) -> Callable[[str], tuple[str, dict]]:
    """Factory: ``target(name) -> (url, storage_options)`` on a local dir, SeaweedFS S3 or
    Azurite. (Not the GCS emulator: fake-gcs-server has no XML API object PUT, which delta-rs
    writes with; docs/storage.md.)"""
    if request.param == "local":
        return lambda name: (str(tmp_path / unique(name)), {})
    if request.param == "azure":
        azurite = request.getfixturevalue("azurite")
        return lambda name: (azurite.url(unique(name)), azurite.storage_options)
    s3 = request.getfixturevalue("s3")
    return lambda name: (s3.url(unique(name)), s3.storage_options)
