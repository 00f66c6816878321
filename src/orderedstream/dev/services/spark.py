"""Spark for the demo and the tests: a local session, or a real standalone cluster.

The main job's local session (``JOB_*`` settings, the fork server) is built by
``orderedstream.dev.embedded_session``, the one place that turns the pack's process tuning on.

The standalone cluster is Spark's own Master and Workers started with pyspark's ``spark-class``:
tasks then run in separate executor JVMs (one per worker), which is how executor loss and state
moving between executors are exercised on one machine.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orderedstream.core import forkserver, tuning
from orderedstream.core.jvm import bundled_jar
from orderedstream.core.scratch import private_folder
from orderedstream.dev.services import sparkhome
from orderedstream.dev.services.process import ManagedProcess, free_ports, port_open, wait_until


def spark_home() -> Path:
    """pyspark's bundled Spark distribution (jars, bin/spark-class)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


JOB_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms64m"
"""Driver JVM options of the main job's local session (``orderedstream run``). With
``emit=ranges`` records never cross the JVM: it plans, tracks offsets and moves a few rows per
batch, so C2 compilation (``TieredStopAtLevel=1`` leaves it out) cost more CPU than it saved
(JVM CPU of a 13-batch run 28.6 -> 14.2 s), and the serial collector with a small initial heap
keeps the JVM's RSS to what it uses (740 -> 380 MiB at the job's peak). Not used for the
sessions that measure Spark's own JVM paths. (Capping the young generation at 32 MiB with
``Min/MaxHeapFreeRatio`` 10/30 did not lower the JVM's peak RSS: 380 -> 406 MiB, smallbatch.)"""

JOB_ENVIRONMENT = {"MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}
"""Environment of the main job's driver JVM and so of every Python process it starts (local
mode), unless the user's environment sets the variable. glibc's malloc keeps up to 8 arenas
per core in a multi-threaded process (RocksDB, librdkafka, Arrow and the JVM all start
threads), each holding freed memory; Arrow's default jemalloc pool keeps freed pages too. The
driver's own Python process keeps its environment."""


FORK_PRELOAD = ("orderedstream.python_datasource.source",)
"""What the fork server imports besides pyspark's modules: the source Spark's streaming runner
and planners unpickle (``local_spark_session(fork_server=True)``)."""


UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
UNIX_SOCKET_DIR = "spark.python.unix.domain.socket.dir"
_SOCKET_NAME = len("/.00000000-0000-0000-0000-000000000000.sock")
"""Spark and pyspark name a socket ``.<uuid4>.sock`` in the socket folder."""
_SOCKET_FOLDER = "orderedstream-uds-"
"""``tempfile.mkdtemp``'s prefix of the private socket folder (8 random characters follow)."""

JOB_CONF = {
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "2000",
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedDeadExecutors": "10",
    "spark.sql.streaming.ui.retainedQueries": "20",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    UNIX_SOCKETS: "true",
}
"""Spark settings of the main job's local session: how much finished work the driver's status
store keeps (on the JVM heap, also with the UI off). Spark's defaults (1,000 jobs and stages,
100,000 tasks, 1,000 SQL executions) let a long streaming run's driver heap grow for hours: a
batch of the job is a few jobs, a dozen tasks and one or two SQL executions.

Adaptive query execution off: a batch's stage (the source's range rows, one small shuffle,
the ordered stage's tasks) has nothing for AQE to re-plan (the shuffle's partition count is
set, one per core), yet AQE runs the shuffle as a query stage of its own Spark job, then
re-optimizes and submits the rest as a second job: two jobs and their planning per batch
instead of one. Off, in turns with on (docs/decisions/0004-adaptive-query-execution-off.md): the
12 x 100-record batch's p50 604 -> 519 ms (medians of 4 runs each), the one-batch peer run
-0.19 s, 0.4 CPU-s less, peak RSS 10-25 MiB lower.

Code generation off (whole-stage codegen and expression codegen: Spark's interpreted
operators and projections). The rows that cross the JVM in a batch of the main job are its
range rows and the tasks' commit messages, a few dozen, so generated code never pays back its
Janino compile: 40% of the driver's CPU for the batch's ``collect`` in a flight recording of
the one-batch peer run. Off, in turns with on (the same decision record): the JVM
3.8 / 3.8 CPU-s against 4.1 / 4.3, the run 0.4 s shorter, the 12 x 100 batch's p50 unchanged.
A job whose records cross the JVM (``emit=records``) should not run with these two settings.
``factoryMode`` is one of Spark's internal settings (its SQLConf: not meant for end users);
``tests/dev/test_job_session.py`` checks that this Spark still has it and that a plan
under these settings has no generated code, so an upgrade that drops it is noticed.

The JVM talks to its Python processes over Unix domain sockets, not TCP on localhost: the
second task of every batch's stage waited 35-45 ms for its first input rows (its worker's
first read, timed in the task: 1-2 ms for the first task, 40 ms for the second, batch after
batch), the delay of TCP's delayed acknowledgement meeting Nagle's algorithm on a small write;
over a Unix socket both start within 10 ms (in turns, TCP vs Unix: the 12 x 100 batch's p50
588/621/586 vs 590/573/530 ms, docs/decisions/0005-unix-domain-sockets.md). Local masters
only (``unix_sockets``: the sockets live in a private folder of this machine)."""


def unix_sockets(settings: dict[str, str], master: str) -> None:
    """Make ``settings``' Unix sockets work, in place: on a local master they get a private
    folder (0700, removed at exit) whose sockets' paths fit Linux's 107 bytes (Spark puts
    them in ``java.io.tmpdir``, a run's scratch folder here, often deeper than that: "AF_UNIX
    path too long"); elsewhere, or without such a folder, TCP as Spark's default."""
    if settings.get(UNIX_SOCKETS, "false").lower() != "true" or settings.get(UNIX_SOCKET_DIR):
        return
    if master.startswith("local"):
        # core.scratch: where the sockets' paths fit; folders of killed drivers go first
        folder = private_folder(_SOCKET_FOLDER, longest_name=_SOCKET_NAME - 1)
        if folder is not None:
            atexit.register(shutil.rmtree, str(folder), True)
            settings[UNIX_SOCKET_DIR] = str(folder)
            return
    settings[UNIX_SOCKETS] = "false"


def python_env() -> dict[str, str]:
    """Environment that makes Spark's Python workers use this interpreter (and its packages)."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def default_conf(tmp_dir: Path | None = None) -> dict[str, str]:
    """Small-machine settings shared by every session the pack configures."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.driver.extraJavaOptions": "-Dio.netty.tryReflectionSetAccessible=true",
        # Python workers import pyspark's compiled files, not pyspark.zip (see the module).
        "spark.python.daemon.module": "orderedstream.core.pydaemon",
    }
    if tmp_dir is not None:
        # Scratch space and the JVMs' java.io.tmpdir (Spark makes spark-<uuid> folders there,
        # left behind when a JVM is killed) both go under tmp_dir, not the system temp dir.
        Path(tmp_dir).mkdir(parents=True, exist_ok=True)
        java_tmp = f" -Djava.io.tmpdir={tmp_dir}"
        conf["spark.local.dir"] = str(tmp_dir)
        conf["spark.driver.extraJavaOptions"] += java_tmp
        conf["spark.executor.extraJavaOptions"] = java_tmp.strip()
    jar = bundled_jar()
    if jar is not None:
        conf["spark.jars"] = str(jar)
    return conf


def local_spark_session(app_name: str = "orderedstream", master: str = "local[2]",
                        conf: Mapping[str, str] | None = None, tmp_dir: Path | None = None,
                        driver_memory: str = "2g", java_options: str = "",
                        environment: Mapping[str, str] | None = None,
                        fork_server: bool = False) -> Any:
    """A SparkSession whose Python workers use this interpreter; extra ``conf`` wins.
    ``java_options`` are added to the driver JVM's (e.g. a log4j2 configuration file);
    ``environment``: variables the driver JVM (and the Python processes it starts) gets where
    this process's environment does not set them (e.g. ``JOB_ENVIRONMENT``). ``fork_server``
    (local masters): Spark's planner and streaming source processes are forked from a warm
    interpreter (``orderedstream.core.forkserver``) instead of started cold."""
    os.environ.update(python_env())
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    base = default_conf(tmp_dir)
    if java_options:
        base["spark.driver.extraJavaOptions"] += f" {java_options}"
    settings = {**base, "spark.driver.memory": driver_memory, **(conf or {})}
    if conf and "spark.jars" in conf and base.get("spark.jars"):
        settings["spark.jars"] = f"{base['spark.jars']},{conf['spark.jars']}"
    unix_sockets(settings, master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    # The JVM (and every Python process it starts) gets a home whose Python processes run
    # pyspark's compiled files (see sparkhome); this process's environment is left as it was.
    home = sparkhome.for_session(master)
    launch = {k: v for k, v in (environment or {}).items() if k not in os.environ}
    if home is not None:
        launch["SPARK_HOME"] = str(home)
    if fork_server and master.startswith("local") and "spark.pyspark.python" not in (conf or {}):
        server = forkserver.start(sys.executable, environment=launch, preload=FORK_PRELOAD)
        if server is not None:  # Spark's Python executable (its planners read the variables)
            builder = builder.config("spark.pyspark.python", server.launcher).config(
                "spark.executorEnv.PYSPARK_PYTHON", server.launcher)
            launch.update(PYSPARK_PYTHON=server.launcher, PYSPARK_DRIVER_PYTHON=server.launcher)
    previous = {key: os.environ.get(key) for key in launch}
    os.environ.update(launch)
    try:
        return builder.getOrCreate()
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class SparkStandaloneCluster:
    """Spark standalone Master + N Workers (each ``cores`` cores) on loopback."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1,
                 memory: str = "2g") -> None:
        self.workdir = Path(workdir)
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.port, self.web_port = free_ports(2)
        self.master: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        # An executor gets what its application gives it (spark.executorEnv.*), not this
        # process's process-tuning switch through the workers' environment.
        env = {k: v for k, v in os.environ.items() if k != tuning.ENV}
        env.update(python_env())
        env.update({"SPARK_HOME": str(spark_home()), "SPARK_NO_DAEMONIZE": "1",
                    "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(self.workdir / "work"),
                    "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
                    # The master's and workers' own temp folders stay in the workdir too.
                    "SPARK_DAEMON_JAVA_OPTS": f"-Djava.io.tmpdir={self.workdir / 'tmp'}"})
        return env

    def _spark_class(self, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), *args]

    def start(self, timeout: float = 90.0) -> SparkStandaloneCluster:
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        self.master = ManagedProcess(
            "spark-master",
            self._spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", str(self.port), "--webui-port", str(self.web_port)),
            self.workdir / "master.log", env=self._env()).start()
        wait_until(lambda: port_open(self.port), timeout, f"Spark master {self.url}",
                   self.master.log_path, self.master)
        for index in range(self.n_workers):
            self.workers.append(self._start_worker(index))
        wait_until(lambda: self.registered_workers() >= self.n_workers, timeout,
                   f"{self.n_workers} Spark workers registered with {self.url}",
                   self.master.log_path, self.master)
        return self

    def _start_worker(self, index: int) -> ManagedProcess:
        (web_port,) = free_ports(1)
        return ManagedProcess(
            f"spark-worker-{index}",
            self._spark_class("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                              "--cores", str(self.cores), "--memory", self.memory,
                              "--webui-port", str(web_port),
                              "--work-dir", str(self.workdir / f"work-{index}"), self.url),
            self.workdir / f"worker-{index}.log", env=self._env()).start()

    def registered_workers(self) -> int:
        """How many distinct workers the master's log says registered (live or not)."""
        if self.master is None or not self.master.log_path.exists():
            return 0
        text = self.master.log_path.read_text(errors="replace")
        return len(set(re.findall(r"Registering worker (\S+)", text)))

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker and the executor JVM it launched (same process group)."""
        self.workers[index].kill()

    def restart_worker(self, index: int) -> None:
        self.workers[index] = self._start_worker(index)

    def session(self, app_name: str = "orderedstream-cluster",
                conf: Mapping[str, str] | None = None) -> Any:
        """A SparkSession on this cluster: one executor per worker, ``cores`` cores each."""
        settings = {"spark.executor.memory": "1g", "spark.executor.cores": str(self.cores),
                    "spark.cores.max": str(self.cores * self.n_workers),
                    "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                    **(conf or {})}
        if tuning.process_tuning():  # the driver's tuning reaches the executors as documented
            settings.setdefault(f"spark.executorEnv.{tuning.ENV}", os.environ[tuning.ENV])
        return local_spark_session(app_name, master=self.url, conf=settings,
                                   tmp_dir=self.workdir / "driver-local", driver_memory="1g")

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop(timeout=10)
        if self.master:
            self.master.stop(timeout=10)


def s3a_conf(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1",
             prefix: str = "spark.hadoop.") -> dict[str, str]:
    """Hadoop S3A settings for an S3-compatible endpoint (path-style, plain HTTP allowed).

    With the default prefix they are Spark conf entries; with ``prefix=""`` they can be set on
    a running session's ``sparkContext._jsc.hadoopConfiguration()``. The jars come from
    ``orderedstream.dev.services.jars.hadoop_aws_jars()``. Seen with SeaweedFS (no identities
    configured): signed reads work, but S3A's chunk-signed uploads get 400 "Signed request
    requires setting up SeaweedFS S3 authentication"; for Spark writing there, use
    ``fs.s3a.aws.credentials.provider=org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider``.
    """
    settings = {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": access_key,
        "fs.s3a.secret.key": secret_key,
        "fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        "fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    return {prefix + key: value for key, value in settings.items()}
