"""A real Apache Kafka broker (KRaft, combined broker+controller) as a local process.

Started the way Kafka's own scripts do: format the storage directory with a cluster id, then run
``kafka.Kafka server.properties``. The broker keeps its ports and data directory across
``stop``/``kill``/``restart`` so tests can crash it and bring it back on the same log.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from orderedstream.core.errors import ServiceError
from orderedstream.dev.services.jars import KAFKA_VERSION, kafka_broker_classpath
from orderedstream.dev.services.process import ManagedProcess, free_ports, wait_until

# Settings that make a one-node broker behave in tests: replication factor 1 for internal topics,
# no rebalance delay, and fast retention/cleaner checks so retention and compaction tests finish.
_BROKER_DEFAULTS: dict[str, str] = {
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.check.interval.ms": "1000",
    "log.segment.delete.delay.ms": "0",
    "log.cleaner.backoff.ms": "500",
    "log.initial.task.delay.ms": "0",
    "file.delete.delay.ms": "0",
}


class KafkaBroker:
    """One KRaft Kafka node on loopback; ``bootstrap`` is its client address."""

    def __init__(self, workdir: Path, *, version: str = KAFKA_VERSION, heap: str = "768m",
                 overrides: Mapping[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.version = version
        self.heap = heap
        self.port, self.controller_port = free_ports(2)
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "kafka.log"
        self.settings = {**_BROKER_DEFAULTS, **(overrides or {})}
        self.cluster_id: str | None = None
        self._proc: ManagedProcess | None = None
        self._admin: Any = None

    @property
    def bootstrap(self) -> str:
        """The broker's client address, ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    # -- lifecycle -------------------------------------------------------------------------
    def _write_config(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **self.settings,
        }
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def _java(self, main: str, *args: str, heap: str | None = None,
              log_config: str = "kafka-log4j2.properties") -> list[str]:
        log4j = resources.files("orderedstream.dev.services").joinpath("resources", log_config)
        java = shutil.which("java")
        if java is None:
            raise ServiceError(
                "Java 17+ is needed to run the local Kafka broker ('java' not found)")
        heap = heap or self.heap
        # The broker's scratch (lz4-java extracts its native library there, and a killed JVM
        # leaves it) in its work folder, not the system temporary directory.
        tmp = self.workdir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return [java, f"-Xmx{heap}", "-XX:+UseG1GC", f"-Djava.io.tmpdir={tmp}",
                f"-Dlog4j2.configurationFile={log4j}", "-Djava.awt.headless=true",
                "-cp", kafka_broker_classpath(self.version), main, *args]

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        """Format storage on first start, start the broker, and wait until it serves metadata.

        Parameters
        ----------
        timeout
            Seconds the broker has to serve metadata.

        Returns
        -------
        KafkaBroker
            This broker, running.

        Raises
        ------
        ServiceError
            No ``java`` on the PATH, the broker's jars could not be fetched, formatting the
            storage failed, or the broker exited or served no metadata within ``timeout``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        if not (self.data_dir / "meta.properties").exists():
            self.cluster_id = self.cluster_id or _kafka_cluster_id()
            fmt = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "--config", str(config),
                           "--cluster-id", self.cluster_id, "--standalone", "--ignore-formatted"),
                capture_output=True, text=True, check=False)
            if fmt.returncode != 0:
                raise ServiceError(f"kafka storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        self._proc = ManagedProcess("kafka", self._java("kafka.Kafka", str(config)),
                                    self.log_path).start()
        wait_until(self._serves_metadata, timeout, f"Kafka broker on {self.bootstrap}",
                   self.log_path, self._proc)
        return self

    def _serves_metadata(self) -> bool:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        md = admin.list_topics(timeout=2)
        return bool(md.brokers)

    def stop(self) -> None:
        """Graceful shutdown (controlled shutdown, logs flushed)."""
        self._admin = None
        if self._proc:
            self._proc.stop(timeout=30)

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would."""
        self._admin = None
        if self._proc:
            self._proc.kill()

    def restart(self, timeout: float = 90.0) -> KafkaBroker:
        """Start again on the same ports and data directory (after stop or kill); a broker
        still running is stopped first.

        Parameters
        ----------
        timeout
            As for :meth:`start`.

        Returns
        -------
        KafkaBroker
            This broker, running.

        Raises
        ------
        ServiceError
            As for :meth:`start`."""
        if self._proc and self._proc.alive():
            self.stop()
        return self.start(timeout)

    def alive(self) -> bool:
        """Whether the broker process runs."""
        return bool(self._proc and self._proc.alive())

    def java_tool(self, main: str, *args: str, stdin: str = "", timeout: float = 60) -> str:
        """Run one of Kafka's own JVM tools (e.g. the console producer) and return its stdout.

        Kafka's Java clients are an independent second client next to librdkafka.

        Parameters
        ----------
        main
            The tool's main class.
        *args
            Its arguments.
        stdin
            Text fed to its standard input.
        timeout
            Seconds the tool may run.

        Returns
        -------
        str
            The tool's standard output.

        Raises
        ------
        ServiceError
            No ``java`` on the PATH, or the tool exited with an error (its stderr's end in
            the message).
        subprocess.TimeoutExpired
            The tool ran longer than ``timeout``."""
        proc = subprocess.run(self._java(main, *args, heap="256m",
                                         log_config="kafka-tools-log4j2.properties"),
                              input=stdin, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise ServiceError(f"{main} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc.stdout

    # -- topics and records ----------------------------------------------------------------
    def admin(self) -> Any:
        """A confluent_kafka AdminClient bound to this broker (cached until stop/kill)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def create_topic(self, name: str, partitions: int = 1,
                     config: Mapping[str, str] | None = None, timeout: float = 30) -> None:
        """Create a topic and wait until every partition has a leader.

        Parameters
        ----------
        name
            The topic.
        partitions
            Its partition count.
        config
            Topic settings (e.g. ``{"cleanup.policy": "compact"}``).
        timeout
            Seconds for the creation and, again, for the leaders.

        Raises
        ------
        confluent_kafka.KafkaException
            The broker refused the topic (e.g. ``TOPIC_ALREADY_EXISTS``) or did not answer.
        ServiceError
            A partition had no leader within ``timeout``."""
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1,
                      config=dict(config or {}))], operation_timeout=timeout)
        futures[name].result(timeout)
        wait_until(lambda: self._has_leaders(name, partitions), timeout,
                   f"leaders for topic {name}")

    def _has_leaders(self, name: str, partitions: int) -> bool:
        md = self.admin().list_topics(topic=name, timeout=5).topics.get(name)
        return (md is not None and md.error is None and len(md.partitions) == partitions
                and all(p.leader >= 0 for p in md.partitions.values()))

    def add_partitions(self, name: str, total: int, timeout: float = 30) -> None:
        """Grow ``name`` to ``total`` partitions and wait until each has a leader.

        Parameters
        ----------
        name
            The topic.
        total
            Its partition count afterwards.
        timeout
            Seconds for the change and, again, for the leaders.

        Raises
        ------
        confluent_kafka.KafkaException
            The broker refused the change or did not answer.
        ServiceError
            A partition had no leader within ``timeout``."""
        from confluent_kafka.admin import NewPartitions

        self.admin().create_partitions([NewPartitions(name, total)])[name].result(timeout)
        wait_until(lambda: self._has_leaders(name, total), timeout, f"partitions of {name}")

    def delete_topic(self, name: str, timeout: float = 30) -> None:
        """Delete ``name`` and wait until the broker no longer lists it.

        Parameters
        ----------
        name
            The topic.
        timeout
            Seconds for the deletion and, again, for the listing.

        Raises
        ------
        confluent_kafka.KafkaException
            The broker refused the deletion or did not answer.
        ServiceError
            The broker still listed the topic after ``timeout``."""
        self.admin().delete_topics([name], operation_timeout=timeout)[name].result(timeout)
        wait_until(lambda: name not in self.admin().list_topics(timeout=5).topics, timeout,
                   f"deletion of topic {name}")

    def producer(self, **config: Any) -> Any:
        """A confluent_kafka Producer (idempotent, acks=all) bound to this broker.

        Parameters
        ----------
        **config
            librdkafka settings over the defaults, ``_`` for ``.`` in their names (e.g.
            ``linger_ms=0``).

        Returns
        -------
        confluent_kafka.Producer
            A new producer."""
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                "linger.ms": 5, **{k.replace("_", "."): v for k, v in config.items()}}
        return Producer(conf)

    def produce(self, topic: str, records: Iterable[tuple[bytes | str | None, bytes | str | None]],
                partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None) -> int:
        """Produce (key, value) pairs and flush.

        Parameters
        ----------
        topic
            The topic.
        records
            ``(key, value)`` pairs; None for no key or a tombstone.
        partition
            The partition for every record; None: the producer's partitioner chooses.
        headers
            Headers for every record.

        Returns
        -------
        int
            How many records were delivered.

        Raises
        ------
        ServiceError
            A record was not delivered (an error, or still queued after the flush's wait)."""
        producer = self.producer()
        delivered = 0
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            nonlocal delivered
            if err is None:
                delivered += 1
            else:
                errors.append(str(err))

        kwargs: dict[str, Any] = {"on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = headers
        for key, value in records:
            while True:
                try:
                    producer.produce(topic, key=key, value=value, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining or errors:
            raise ServiceError(f"produce to {topic}: {remaining} undelivered, errors {errors[:3]}")
        return delivered

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The high watermark (next offset) of each of ``topic``'s partitions.

        Parameters
        ----------
        topic
            The topic.

        Returns
        -------
        dict of int to int
            Partition -> high watermark.

        Raises
        ------
        confluent_kafka.KafkaException
            The broker did not answer in time."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "offsets-probe",
                             "enable.auto.commit": False})
        try:
            md = consumer.list_topics(topic, timeout=10).topics[topic]
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in sorted(md.partitions)}
        finally:
            consumer.close()


def _kafka_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 chars)."""
    import base64

    while True:  # an id starting with "-" would read as an option to StorageTool
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
