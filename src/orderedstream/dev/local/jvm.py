"""The embedded local session's tuning through py4j: what it changes in Spark's driver JVM and
in PySpark's py4j for the main job's query on this machine.

Installed for the session by ``orderedstream.dev.embedded_session`` (and the development
sessions of ``orderedstream.dev.services.spark``) as the process's session tuning
(``orderedstream.core.tuning.install_session_tuning``), and used by the main job only through
it and only with ``ORDEREDSTREAM_PROCESS_TUNING=1``: a plain session gets none of it. These
reach into Spark's internals (``PythonUtils``, the driver's ``SparkEnv`` worker pools through
the JVM shim, a checkpoint file manager class) and PySpark's private py4j converters; each
degrades to "nothing changed" when they are not there.
"""

from __future__ import annotations

import logging
from typing import Any

_log = logging.getLogger(__name__)


class LocalSessionTuning:
    """``orderedstream.core.tuning.SessionTuning`` of the embedded local session."""

    def share_python_workers(self, spark: Any) -> bool:
        """One pool of Python workers for the source's reads and the stage: see
        :func:`share_python_workers`.

        Parameters
        ----------
        spark
            The session.

        Returns
        -------
        bool
            True when shared."""
        return share_python_workers(spark)

    def release_planner_workers(self, spark: Any) -> list[str]:
        """Stop Spark's idle planner workers: see :func:`release_planner_workers`.

        Parameters
        ----------
        spark
            The session.

        Returns
        -------
        list of str
            The worker modules whose pools were stopped."""
        return release_planner_workers(spark)

    def start_query(self, spark: Any, writer: Any, checkpoint: str) -> Any:
        """``writer.start()`` with the checkpoint file manager of :func:`local_checkpoint_manager`
        for a local checkpoint (the setting is set for that call only, so other queries of the
        session keep their own).

        Parameters
        ----------
        spark
            The session.
        writer
            The query's ``DataStreamWriter``, its checkpoint location set.
        checkpoint
            That checkpoint location.

        Returns
        -------
        pyspark.sql.streaming.StreamingQuery
            The started query.

        Raises
        ------
        Exception
            Whatever ``writer.start()`` raises (the setting is unset all the same).

        Runs on
        -------
        driver"""
        manager = local_checkpoint_manager(spark, checkpoint)
        if manager is None:
            return writer.start()
        spark.conf.set(CHECKPOINT_MANAGER_CONF, manager)
        try:
            return writer.start()
        finally:
            spark.conf.unset(CHECKPOINT_MANAGER_CONF)

    def batch_started(self) -> None:
        """The query has started its source runner: the fork server's job is done."""
        from orderedstream.dev.local import forkserver

        forkserver.stop_all()


def share_python_workers(spark: Any) -> bool:
    """Let the Python functions this driver creates (``mapInArrow``, UDFs, RDD functions) run
    in the Python workers Spark starts for Python Data Source reads: one daemon and one pool of
    idle workers instead of two, so a worker that read a source's partition serves the next
    stage. Spark keys its pools by the function's environment: a Data Source function carries
    only ``PYTHONPATH`` (Spark's Python path), pyspark's carry ``PYSPARK_PYTHON`` and
    ``PYTHONHASHSEED``. In local mode the workers inherit those two from the driver JVM with the
    same values, so they are left out and ``PYTHONPATH`` added: every worker's environment is
    what it was. Elsewhere (a cluster, other settings) nothing changes.

    Parameters
    ----------
    spark
        The session (classic, with a JVM).

    Returns
    -------
    bool
        True when shared, False when nothing changed.

    Runs on
    -------
    driver
    """
    sc = spark.sparkContext
    if not str(sc.master).startswith("local"):
        return False
    jvm = sc._jvm
    try:  # PythonUtils.createPythonFunction's PYTHONPATH (that method is private to Spark)
        utils = jvm.org.apache.spark.api.python.PythonUtils
        system = jvm.java.lang.System
        parts = [utils.sparkPythonPath(), system.getenv("PYTHONPATH") or ""]
        path = str(utils.mergePythonPaths(utils.toSeq(parts)))
        inherited = {key: system.getenv(key) for key in sc.environment}
    except Exception as exc:  # noqa: BLE001 - internal APIs: without them, two pools as before
        _log.info("Python workers of data sources and of UDFs stay in two pools: %s", exc)
        return False
    own = {k: v for k, v in sc.environment.items() if k != "PYTHONPATH" and inherited[k] != v}
    if own or not path:  # a setting the workers would not inherit: keep it, and two pools
        return False
    sc.environment.clear()
    sc.environment["PYTHONPATH"] = path
    return True


FORKLESS_CHECKPOINT_MANAGER = "orderedstream.shim.ForklessCheckpointFileManager"
"""The shim's manager: Spark's ``FileSystem`` one whose local filesystem sets file modes with
``java.nio`` instead of a ``chmod`` process per file
(docs/decisions/0003-local-checkpoint-file-manager.md)."""
#: Checkpoint file managers over Hadoop's ``FileSystem`` API, the first one loadable wins: the
#: shim's, then Spark's own (Spark 4 name, then 3.x).
FS_CHECKPOINT_MANAGERS = (
    FORKLESS_CHECKPOINT_MANAGER,
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager")
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"


def local_checkpoint_manager(spark: Any, checkpoint: str) -> str | None:
    """The checkpoint file manager to give a query whose ``checkpoint`` is on the local
    filesystem, or None (another filesystem, a manager the user chose, or none found).

    Spark's default manager goes through Hadoop's ``FileContext``, whose local filesystem
    starts a ``readlink`` process (``FileUtil.readLink``) for every existence check of a
    rename of the offset and commit logs, which slows each batch's ``walCommit`` and
    ``commitOffsets``. The ``FileSystem`` manager renames with ``java.io.File`` (atomic on a
    local disk) and starts none. Without Hadoop's native library (pyspark ships none) its
    filesystem still starts a ``chmod`` process for every file it creates (the logs' files and
    their checksums); the shim's subclass of it (``FORKLESS_CHECKPOINT_MANAGER``, when the
    shim's jar is on the driver) sets the same modes without one
    (docs/decisions/0003-local-checkpoint-file-manager.md).

    Parameters
    ----------
    spark
        The session (classic; under Spark Connect the answer is None).
    checkpoint
        The query's checkpoint location.

    Returns
    -------
    str or None
        The manager's class name, the first of :data:`FS_CHECKPOINT_MANAGERS` the driver can
        load.

    Runs on
    -------
    driver"""
    if spark.conf.get(CHECKPOINT_MANAGER_CONF, None):
        return None
    try:  # no JVM here (Spark Connect): Spark's default manager
        jvm = spark.sparkContext._jvm
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        path = jvm.org.apache.hadoop.fs.Path(checkpoint)
        scheme = str(path.getFileSystem(conf).getScheme())
    except Exception as exc:  # noqa: BLE001 - no manager change; Spark reports the path itself
        _log.debug("checkpoint %s: filesystem not resolved (%s)", checkpoint, exc)
        return None
    if scheme != "file":
        return None
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    for name in FS_CHECKPOINT_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name, False, loader)
            return name
        except Exception:  # noqa: BLE001, S112 - the other Spark version's name
            continue
    return None


#: The shim's class that stops idle pools of Spark's Python planner runs (py4j).
PLANNER_WORKERS_CLASS = "orderedstream.shim.PlannerWorkers"


_shim_classes: dict[str, tuple[Any, Any]] = {}


def _shim_class(spark: Any, name: str) -> Any | None:
    """The JVM class ``name`` of the shim on this session's driver, or None (no jar, no JVM).

    Kept per gateway (else one py4j round trip per package level on every call, and the batch
    function asks every batch); a new session's gateway looks it up again."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None or getattr(spark, "_jsparkSession", None) is None:
        return None
    known = _shim_classes.get(name)
    if known is not None and known[0] is jvm:
        return known[1]
    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JError

    try:
        cls = jvm
        for part in name.split("."):
            cls = getattr(cls, part)
    except Py4JError:
        return None
    if not isinstance(cls, JavaClass):
        return None
    _shim_classes[name] = (jvm, cls)
    return cls


def release_planner_workers(spark: Any) -> list[str]:
    """Stop the idle Python processes Spark keeps for its planner runs; the modules released.

    Spark plans a Python Data Source (``orderedkafka``) in Python on the driver, one worker
    module per step (``pyspark.sql.worker.lookup_data_sources``, ``create_data_source``,
    ``plan_data_source_read``), each with its own ``pyspark.daemon`` and an idle forked worker,
    whose memory is kept until the SparkEnv stops although a streaming query plans only when it
    starts (docs/decisions/0010-planner-worker-release.md). The shim stops the pools whose
    workers are all idle, under the lock Spark takes to hand workers out; a later plan (a
    restarted query, a new query) starts them again.

    Parameters
    ----------
    spark
        The session.

    Returns
    -------
    list of str
        The worker modules whose pools were stopped; [] without the shim, without a JVM
        (Spark Connect) or when Spark's internals changed.

    Runs on
    -------
    driver
    """
    cls = _shim_class(spark, PLANNER_WORKERS_CLASS)
    if cls is None:
        return []
    from py4j.protocol import Py4JError

    try:
        released = cls.releasePlanners()
        # By index, not by iterating: py4j ends an iteration with a Java exception whose
        # stack trace it fetches, a cost paid every batch even for the usual empty list.
        return [str(released.get(i)) for i in range(released.size())]
    except Py4JError as exc:  # Spark internals changed: the pools stay, as without the shim
        _log.info("Spark's planner Python workers are kept: %s", str(exc).splitlines()[0])
        return []


def python_worker_pools(spark: Any) -> dict[str, int]:
    """The Python worker pools in the driver's SparkEnv. For tests and diagnostics.

    Parameters
    ----------
    spark
        The session.

    Returns
    -------
    dict of str to int
        Worker module -> live workers of its pool; {} without the shim or a JVM.

    Runs on
    -------
    driver"""
    cls = _shim_class(spark, PLANNER_WORKERS_CLASS)
    if cls is None:
        return {}
    return {str(k): int(v) for k, v in cls.pools().items()}


def light_numpy_converters() -> int:
    """Replace PySpark's py4j input converters for NumPy values with ones that do not import
    ``pyspark.testing.utils``; the number replaced.

    PySpark's ``NumpyScalarConverter`` / ``NumpyArrayConverter`` ask ``pyspark.testing.utils``
    whether NumPy is installed, on the first py4j call with arguments (creating the session's
    ``SparkConf``). That module checks for pandas, grpc and more, and imports pandas into the
    driver for nothing (docs/decisions/0014-no-pandas-import.md). A NumPy value can only exist
    once ``numpy`` is imported, so the replacements look at ``sys.modules`` and convert exactly
    what the originals convert. Call before the session starts; idempotent. A change of the
    whole process's py4j: only the embedded local session calls it
    (``orderedstream.dev.embedded_session``); ``ORDEREDSTREAM_LAZY_PANDAS=0`` or no
    ``ORDEREDSTREAM_PROCESS_TUNING=1``: left as they are.

    Returns
    -------
    int
        How many converters were replaced (0 when turned off or already replaced).

    Runs on
    -------
    driver"""
    import sys

    from orderedstream.core.pandaslazy import enabled

    if not enabled():
        return 0
    from py4j import protocol
    from pyspark.sql import types

    class _Scalar(types.NumpyScalarConverter):
        def can_convert(self, obj: Any) -> bool:
            np = sys.modules.get("numpy")
            return np is not None and isinstance(obj, np.generic)

    class _Array(types.NumpyArrayConverter):
        def can_convert(self, obj: Any) -> bool:
            np = sys.modules.get("numpy")
            return np is not None and isinstance(obj, np.ndarray) and obj.ndim == 1

    replaced = 0
    for i, converter in enumerate(protocol.INPUT_CONVERTER):
        kind = type(converter)
        if kind is types.NumpyScalarConverter:
            protocol.INPUT_CONVERTER[i], replaced = _Scalar(), replaced + 1
        elif kind is types.NumpyArrayConverter:
            protocol.INPUT_CONVERTER[i], replaced = _Array(), replaced + 1
    return replaced


__all__ = ["CHECKPOINT_MANAGER_CONF", "FORKLESS_CHECKPOINT_MANAGER", "FS_CHECKPOINT_MANAGERS",
           "LocalSessionTuning", "light_numpy_converters", "local_checkpoint_manager",
           "python_worker_pools", "release_planner_workers", "share_python_workers"]
