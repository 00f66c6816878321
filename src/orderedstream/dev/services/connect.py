"""A local Spark Connect server in its own process, for the tests and local runs through Connect.

The pip pyspark ships the Connect server's jar but not ``sbin/start-connect-server.sh``: the
server here is a local session (``local_spark_session``, this venv's interpreter for its Python
workers) with Spark's Connect plugin on a free loopback port, in a child process, so a process
that already has a classic SparkContext (the test suite) can talk to it without a clash.
``python -m orderedstream.dev.services.connect PORT TMP_DIR [JAR,...]`` is that child.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from orderedstream.dev.services.process import ManagedProcess, free_port, port_open, wait_until

PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
CONNECT_JARS = ("spark-connect_", "spark-mllib_", "spark-mllib-local_", "breeze_",
                "breeze-macros_")
"""Name prefixes of the installed jars the server adds to its trimmed Spark home's."""


class ConnectServer:
    """A Spark Connect server on ``sc://127.0.0.1:<port>`` (``local[2]``), in a child process."""

    def __init__(self, workdir: Path, *, jars: list[str] | None = None,
                 master: str = "local[2]", env: dict[str, str] | None = None) -> None:
        """``env``: variables the server (and its Python workers) gets besides this
        process's, e.g. S3 credentials for jobs that take them from the environment."""
        self.workdir = Path(workdir)
        self.env = dict(env or {})
        self.jars = list(jars or [])
        self.master = master
        self.port = free_port()
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """The server's Connect URL, ``sc://127.0.0.1:<port>``."""
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> ConnectServer:
        """Start the server's process and wait until its port accepts connections.

        Parameters
        ----------
        timeout
            Seconds the server has to listen (its Spark session's start included).

        Returns
        -------
        ConnectServer
            This server, listening.

        Raises
        ------
        ServiceError
            The port was not open within ``timeout``.
        RuntimeError
            The server's process exited (its log's last lines in the message)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "orderedstream.dev.services.connect", str(self.port),
                str(self.workdir / "tmp"), self.master, ",".join(self.jars)]
        self.process = ManagedProcess("spark-connect", argv, self.workdir / "connect.log",
                                      env={**os.environ, **self.env}).start()
        process = self.process
        wait_until(lambda: port_open(self.port) or not process.alive(), timeout,
                   f"Spark Connect server on port {self.port}", log=process.log_path)
        if not process.alive():
            raise RuntimeError(f"Spark Connect server exited (code {process.returncode()}):\n"
                               f"{process.tail()}")
        return self

    def session(self) -> Any:
        """A new Connect client session to this server."""
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(self.url).create()

    def stop(self) -> None:
        """Stop the server's process (SIGTERM, then SIGKILL after a grace period)."""
        if self.process is not None:
            self.process.stop()
            self.process = None


def _serve(port: int, tmp_dir: Path, master: str, jars: str) -> None:
    import threading

    from orderedstream.dev.services.spark import local_spark_session, spark_home

    # The session's Spark home (dev.services.sparkhome) leaves out Connect's jar and the ML
    # jars Connect's session cleanup loads (org.apache.spark.ml.util.ConnectHelper): add them.
    connect_jars = [str(j) for prefix in CONNECT_JARS
                    for j in sorted((spark_home() / "jars").glob(f"{prefix}*.jar"))]
    conf = {"spark.plugins": PLUGIN, "spark.connect.grpc.binding.port": str(port),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.jars": ",".join([*connect_jars, *filter(None, jars.split(","))])}
    spark = local_spark_session("orderedstream-connect", master=master, conf=conf,
                                tmp_dir=tmp_dir)
    try:
        threading.Event().wait()  # until SIGTERM
    finally:
        spark.stop()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3],
           sys.argv[4] if len(sys.argv) > 4 else "")
