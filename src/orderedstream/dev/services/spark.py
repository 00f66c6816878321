"""Spark for the demo and the tests: a local session, or a real standalone cluster.

The main job's local session (the settings of ``orderedstream.dev.local.settings``, the fork
server) is built by ``orderedstream.dev.embedded_session``, the one place that turns the pack's
process tuning on.

The standalone cluster is Spark's own Master and Workers started with pyspark's ``spark-class``:
tasks then run in separate executor JVMs (one per worker), which is how executor loss and state
moving between executors are exercised on one machine.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orderedstream.core import tuning
from orderedstream.core.jvm import bundled_jar
from orderedstream.dev.local import forkserver
from orderedstream.dev.local.jvm import LocalSessionTuning
from orderedstream.dev.local.settings import FORK_PRELOAD, unix_sockets
from orderedstream.dev.services import sparkhome
from orderedstream.dev.services.process import ManagedProcess, free_ports, port_open, wait_until


def spark_home() -> Path:
    """pyspark's bundled Spark distribution (jars, bin/spark-class)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def python_env() -> dict[str, str]:
    """Environment that makes Spark's Python workers use this interpreter (and its packages)."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def default_conf(tmp_dir: Path | None = None) -> dict[str, str]:
    """Small-machine settings shared by every session the pack configures: no UI, few
    shuffle partitions, this interpreter for the Python processes, the pack's daemon module
    and its JVM jar when it is built.

    Parameters
    ----------
    tmp_dir
        Where Spark's scratch space and the JVMs' ``java.io.tmpdir`` go (created); None:
        Spark's defaults.

    Returns
    -------
    dict of str to str
        Spark configuration entries."""
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
        "spark.python.daemon.module": "orderedstream.dev.local.pydaemon",
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
    """A SparkSession whose Python workers use this interpreter, with the pack's local
    session tuning installed (:class:`~orderedstream.dev.local.jvm.LocalSessionTuning`).

    Parameters
    ----------
    app_name
        The application's name.
    master
        The Spark master URL.
    conf
        Spark settings over :func:`default_conf`'s (its ``spark.jars`` are added to the
        pack's jar).
    tmp_dir
        Scratch space and the JVMs' temporary folder (see :func:`default_conf`).
    driver_memory
        ``spark.driver.memory``.
    java_options
        Added to the driver JVM's options (e.g. a log4j2 configuration file).
    environment
        Variables the driver JVM (and the Python processes it starts) gets where this
        process's environment does not set them (e.g. ``JOB_ENVIRONMENT``).
    fork_server
        Local masters: fork Spark's planner and streaming source processes from a warm
        interpreter (:mod:`orderedstream.dev.local.forkserver`) instead of starting them
        cold (docs/decisions/0008-fork-server.md).

    Returns
    -------
    pyspark.sql.SparkSession
        The session (an active one of this process is returned as it is).

    Runs on
    -------
    driver"""
    os.environ.update(python_env())
    from pyspark.sql import SparkSession

    # the main job in a development session is tuned as in the embedded one while the process
    # tuning is on (core.tuning.session_tuning)
    tuning.install_session_tuning(LocalSessionTuning())
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
        """The master's URL, ``spark://127.0.0.1:<port>``."""
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
        """Start the master, then the workers, and wait until every worker registered.

        Parameters
        ----------
        timeout
            Seconds the master has to listen and, again, the workers to register.

        Returns
        -------
        SparkStandaloneCluster
            This cluster, running.

        Raises
        ------
        ServiceError
            The master exited, or it did not listen or the workers did not register in
            time."""
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
        """SIGKILL a worker and the executor JVM it launched (same process group).

        Parameters
        ----------
        index
            The worker's index, from 0."""
        self.workers[index].kill()

    def restart_worker(self, index: int) -> None:
        """Start a worker again in the place of a killed one (a new web UI port); it
        registers with the master on its own.

        Parameters
        ----------
        index
            The worker's index, from 0."""
        self.workers[index] = self._start_worker(index)

    def session(self, app_name: str = "orderedstream-cluster",
                conf: Mapping[str, str] | None = None) -> Any:
        """A SparkSession on this cluster: one executor per worker, ``cores`` cores each; the
        pack's process tuning reaches the executors when it is on.

        Parameters
        ----------
        app_name
            The application's name.
        conf
            Spark settings over the cluster's.

        Returns
        -------
        pyspark.sql.SparkSession
            The session (see :func:`local_spark_session`)."""
        settings = {"spark.executor.memory": "1g", "spark.executor.cores": str(self.cores),
                    "spark.cores.max": str(self.cores * self.n_workers),
                    "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                    **(conf or {})}
        if tuning.process_tuning():  # the driver's tuning reaches the executors as documented
            settings.setdefault(f"spark.executorEnv.{tuning.ENV}", os.environ[tuning.ENV])
        return local_spark_session(app_name, master=self.url, conf=settings,
                                   tmp_dir=self.workdir / "driver-local", driver_memory="1g")

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master."""
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

    Parameters
    ----------
    endpoint
        The S3 endpoint's URL (``https`` turns SSL on).
    access_key
        The access key.
    secret_key
        The secret key.
    region
        The endpoint's region.
    prefix
        Put before each ``fs.s3a.*`` key.

    Returns
    -------
    dict of str to str
        The settings.
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
