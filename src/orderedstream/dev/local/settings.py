"""The embedded local session's settings: its driver JVM's options and environment, its Spark
settings (``JOB_CONF``), what its fork server preloads, and its Unix domain sockets.

Used by ``orderedstream.dev.embedded_session`` (and the benchmarks that measure that session);
a plain session (``orderedstream run --master ...``, spark-submit, Spark Connect) gets none of
them. Why each setting is what it is: ``docs/decisions/``.
"""

from __future__ import annotations

import atexit
import shutil

from orderedstream.core.scratch import private_folder

JOB_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms64m"
"""Driver JVM options of the main job's local session (``orderedstream run``). With
``emit=ranges`` records never cross the JVM: it plans, tracks offsets and moves a few rows per
batch, so C2 compilation (``TieredStopAtLevel=1`` leaves it out) costs more CPU than it saves,
and the serial collector with a small initial heap keeps the JVM's RSS to what it uses
(docs/decisions/0011-jvm-class-archive.md). Not used for the sessions that measure Spark's own
JVM paths. (A capped young generation with tight ``Min/MaxHeapFreeRatio`` did not lower the
JVM's peak RSS.)"""

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
instead of one (docs/decisions/0004-adaptive-query-execution-off.md).

Code generation off (whole-stage codegen and expression codegen: Spark's interpreted
operators and projections). The rows that cross the JVM in a batch of the main job are its
range rows and the tasks' commit messages, a few dozen, so generated code never pays back its
Janino compile (the same decision record). A job whose records cross the JVM
(``emit=records``) should not run with these two settings.
``factoryMode`` is one of Spark's internal settings (its SQLConf: not meant for end users);
``tests/dev/test_job_session.py`` checks that this Spark still has it and that a plan
under these settings has no generated code, so an upgrade that drops it is noticed.

The JVM talks to its Python processes over Unix domain sockets, not TCP on localhost: over TCP
the second task of every batch's stage waited for its first input rows, TCP's delayed
acknowledgement meeting Nagle's algorithm on a small write; over a Unix socket both tasks start
at once (docs/decisions/0005-unix-domain-sockets.md). Local masters only (``unix_sockets``: the
sockets live in a private folder of this machine)."""


def unix_sockets(settings: dict[str, str], master: str) -> None:
    """Make ``settings``' Unix sockets work, in place: on a local master they get a private
    folder (0700, removed at exit) whose sockets' paths fit Linux's 107 bytes (Spark puts
    them in ``java.io.tmpdir``, a run's scratch folder here, often deeper than that: "AF_UNIX
    path too long"); elsewhere, or without such a folder, TCP as Spark's default.

    Parameters
    ----------
    settings
        Spark settings of the session to start; changed in place (the socket folder set, or
        the Unix sockets turned off). Settings that turn them off or name a folder stay.
    master
        The session's Spark master URL.

    Runs on
    -------
    driver"""
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


__all__ = ["FORK_PRELOAD", "JOB_CONF", "JOB_ENVIRONMENT", "JOB_JAVA_OPTIONS", "UNIX_SOCKETS",
           "UNIX_SOCKET_DIR", "unix_sockets"]
