"""Each fixture is the real thing: independent clients agree, S3 fences, Spark spreads tasks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from orderedstream.core import storage
from orderedstream.core.errors import ServiceError
from orderedstream.dev.services.embedded import embedded_services, serving


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.key(), msg.value()))
            if len(seen) >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_java_console_producer_to_librdkafka_consumer(kafka, topic) -> None:
    name = topic(partitions=1)
    lines = "".join(f"key-{i}\tvalue-{i}\n" for i in range(5))
    kafka.java_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
                    kafka.bootstrap, "--topic", name, "--property", "parse.key=true",
                    stdin=lines)
    seen = _consume_all(kafka.bootstrap, name, 5)
    assert seen == [(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(5)]


def test_librdkafka_producer_to_java_console_consumer(kafka, topic) -> None:
    name = topic(partitions=1)
    assert kafka.produce(name, [(b"k1", b"hello"), (b"k2", b"world")]) == 2
    out = kafka.java_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                          kafka.bootstrap, "--topic", name, "--from-beginning",
                          "--max-messages", "2", "--timeout-ms", "30000",
                          "--property", "print.key=true")
    assert out.splitlines() == ["k1\thello", "k2\tworld"]


# Slow: the chaos runs (their own command) are what restart the broker.
@pytest.mark.slow
def test_private_broker_survives_kill_and_restart(make_kafka) -> None:
    broker = make_kafka()
    broker.create_topic("durable", 2)
    broker.produce("durable", [(f"k{i}".encode(), b"v") for i in range(50)])
    before = broker.end_offsets("durable")
    port = broker.port
    broker.kill()
    assert not broker.alive()
    broker.restart()
    assert broker.port == port
    assert broker.end_offsets("durable") == before
    assert sum(before.values()) == 50


def test_s3_create_if_absent_is_refused_the_second_time(s3, s3_url) -> None:
    fs = s3.filesystem()
    path = f"{s3_url}/record.json"
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(OSError) as refused:
        fs.pipe_file(path, b"second", mode="create")
    response = getattr(refused.value.__cause__, "response", {})
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert fs.cat_file(path) == b"first"


def test_s3_compare_and_swap_lets_one_writer_win(s3, s3_url) -> None:
    fs = s3.filesystem()
    path = f"{s3_url}/epoch"
    assert storage.create_exclusive(fs, path, b"epoch-1")
    assert not storage.create_exclusive(fs, path, b"epoch-other")
    data, tag = storage.read_versioned(fs, path)
    assert data == b"epoch-1"
    assert storage.replace_if_unchanged(fs, path, b"epoch-2", tag)
    assert not storage.replace_if_unchanged(fs, path, b"epoch-stale", tag)
    assert fs.cat_file(path) == b"epoch-2"


def test_local_exclusive_create_and_cas(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("file")
    path = str(tmp_path / "x" / "record")
    assert storage.create_exclusive(fs, path, b"a")
    assert not storage.create_exclusive(fs, path, b"b")
    _, tag = storage.read_versioned(fs, path)
    assert storage.replace_if_unchanged(fs, path, b"c", tag)
    assert not storage.replace_if_unchanged(fs, path, b"d", tag)
    assert Path(path).read_bytes() == b"c"


def test_private_s3_restarts_with_its_data(make_s3) -> None:
    server = make_s3(bucket="keep")
    fs = server.filesystem()
    fs.pipe_file(server.url("a/b.txt"), b"persisted")
    server.stop()
    server.restart()
    assert server.filesystem().cat_file(server.url("a/b.txt")) == b"persisted"


# Slow: a fixture-side retry; every test that starts S3 runs the first-start path.
@pytest.mark.slow
def test_s3_first_start_picks_new_ports_when_one_was_taken(tmp_path: Path) -> None:
    """The ports an S3Server picks are ephemeral ones: an outgoing connection can take one
    before SeaweedFS binds it (seen in CI). Its first start then picks again; a restart keeps
    its ports."""
    import socket

    from orderedstream.dev.services.s3 import S3Server

    server = S3Server(tmp_path / "s3")
    taken = server.port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", taken))  # bound, not listening: refuses connections fast
        server.start()
        try:
            assert server.port != taken
            fs = server.filesystem()
            fs.pipe_file(server.url("x"), b"up")
            assert fs.cat_file(server.url("x")) == b"up"
            assert "Port allocation failed" in server.log_path.read_text()
            port = server.port
            server.restart()
            assert server.port == port
            assert server.filesystem().cat_file(server.url("x")) == b"up"
        finally:
            server.stop()


def _seaweed_litter(ports: set[int]) -> set[str]:
    """What ``weed mini`` leaves in the temporary directory when left to its defaults: glog
    files, Unix sockets, WebDAV chunk cache folders (8 hex digits holding ``c0_2_0.dat``...).
    Sockets count only when named with one of ``ports`` (the server under test's): other
    servers on the machine keep theirs there too."""
    import re
    import tempfile

    root = Path(tempfile.gettempdir())
    found = set()
    for entry in root.iterdir():
        name = entry.name
        if name.startswith("seaweedfs-"):
            port = re.search(r"-(\d+)\.sock$", name)
            if port is None or int(port.group(1)) in ports:
                found.add(name)
        elif name.startswith(("weed.", "orderedstream-s3-")):
            found.add(name)
        elif re.fullmatch(r"[0-9a-f]{8}", name) and entry.is_dir() and any(
                child.name.startswith("c0_") for child in entry.iterdir()):
            found.add(name)
    return found


def _ports_of(server: object) -> set[int]:
    """``server``'s ports and their gRPC ports (HTTP port + 10000)."""
    ports = {getattr(server, name) for name in
             ("port", "master_port", "volume_port", "filer_port", "webdav_port", "admin_port")}
    return ports | {port + 10000 for port in ports}


def _seaweed_sockets_of(server: object) -> list[Path]:
    """The gRPC sockets SeaweedFS keeps in /tmp for ``server``'s ports (HTTP port + 10000)."""
    ports = {getattr(server, name) + 10000 for name in
             ("port", "master_port", "volume_port", "filer_port", "admin_port")}
    return [p for p in Path("/tmp").glob("seaweedfs-*-grpc-*.sock")
            if int(p.stem.rsplit("-", 1)[1]) in ports]


@pytest.mark.parametrize(("deep", "end"), [(False, "stop"), (True, "stop"), (False, "kill")],
                         ids=["short-workdir", "long-workdir", "killed"])
def test_s3_server_leaves_nothing_in_the_temporary_directory(tmp_path: Path, deep: bool,
                                                             end: str) -> None:
    """Logs, sockets and caches go to the server's work folder; when that folder's path is
    too long for a Unix socket, the sockets go to a private folder removed at stop. A killed
    server's gRPC sockets (SeaweedFS puts them in /tmp, and only a graceful stop removes
    them) are removed by ``kill``."""
    import shutil
    import tempfile

    from orderedstream.dev.services.s3 import S3Server

    # tmp_path's length depends on pytest's base folder: the short case makes its own.
    short = Path(tempfile.mkdtemp(prefix="s3t-"))
    workdir = tmp_path / ("d" * 100) if deep else short / "s3"
    server = S3Server(workdir)
    before = _seaweed_litter(_ports_of(server))
    server.start()
    try:
        fs = server.filesystem()
        fs.pipe_file(server.url("x"), b"up")
        assert fs.cat_file(server.url("x")) == b"up"
        assert any(workdir.glob("weed.*")), "glog files belong in the work folder"
        assert (workdir / "webdav-cache").is_dir()
        # The S3 and filer sockets here; the servers' gRPC sockets stay at SeaweedFS's
        # fixed /tmp path (checked for the killed server below).
        sockets = {p.name.rsplit("-", 1)[0] for p in workdir.glob("seaweedfs-*.sock")}
        assert (not sockets) if deep else {"seaweedfs-s3", "seaweedfs-filer"} <= sockets
        # Only folders made since this test began: other servers still running (the
        # session's fixtures, whose pytest base folder may be long) have their own.
        private = [p for p in Path(tempfile.gettempdir()).glob("orderedstream-s3-*")
                   if p.name not in before and any(p.glob("seaweedfs-*.sock"))]
        assert bool(private) == deep
        if end == "kill":
            grpc = {p.name.rsplit("-", 1)[0] for p in _seaweed_sockets_of(server)}
            assert grpc == {"seaweedfs-s3-grpc", "seaweedfs-filer-grpc", "seaweedfs-master-grpc",
                            "seaweedfs-volume-grpc", "seaweedfs-admin-grpc"}
            server.kill()
    finally:
        server.stop()
        shutil.rmtree(short, ignore_errors=True)
    assert _seaweed_litter(_ports_of(server)) - before == set()


def test_local_spark_runs_python_workers_from_this_venv(spark) -> None:
    import sys

    def interpreter(_: object) -> list[str]:
        import sys as worker_sys

        return [worker_sys.executable]

    found = set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(interpreter).collect())
    assert found == {sys.executable}


@pytest.mark.cluster
def test_cluster_runs_tasks_in_two_executor_processes(cluster_spark) -> None:
    def where(_: object) -> list[str]:
        import time

        time.sleep(0.5)
        # An executor's working directory is <worker work dir>/<app id>/<executor id>.
        return [os.getcwd()]

    dirs = set(cluster_spark.sparkContext.parallelize(range(16), 16).mapPartitions(where).collect())
    executor_ids = {Path(d).name for d in dirs}
    assert len(executor_ids) == 2, dirs


def test_a_work_folder_is_served_by_one_process_at_a_time(tmp_path: Path) -> None:
    """``orderedstream services`` still running on a folder when ``demo`` starts on it: the
    second is refused naming the first (two brokers on one data folder broke both)."""
    folder = tmp_path / "work"
    script = ("import sys, time\n"
              "from pathlib import Path\n"
              "from orderedstream.dev.services.embedded import serving\n"
              "with serving(Path(sys.argv[1])):\n"
              "    print('serving', flush=True)\n"
              "    time.sleep(600)\n")
    folder.mkdir()
    other = subprocess.Popen([sys.executable, "-c", script, str(folder)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline() == "serving\n"
        with pytest.raises(ServiceError, match=rf"the Kafka and S3 data in {folder} are "
                                               rf"already served by pid {other.pid} "):
            with embedded_services(workdir=folder):
                raise AssertionError("a second server started on the same data")
        assert not (folder / "kafka").exists() and not (folder / "s3").exists()
    finally:
        other.kill()
        other.wait()
    with serving(folder):  # its owner ended (even killed): the folder is free again
        assert f"pid {os.getpid()} " in (folder / "services.lock").read_text()
