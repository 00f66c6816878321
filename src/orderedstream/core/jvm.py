"""The one module that reaches the JVM through py4j: the shim's placement calls and its jar.

The shim (``jvm-shim/``) gives the ordered stateful stage executor-sticky placement: the task for
state partition P prefers the executor that last committed P's state, so that executor's local
RocksDB copy is reused instead of restored from the object store (see ``jvm-shim/README.md``).

Without the jar everything still works; only placement of state partitions is left to Spark's
scheduler (state then restores from snapshots more often). That is logged once.

Usage on the driver, inside ``foreachBatch`` (partition index -> state key, e.g. topic-partition)::

    placement = Placement(spark)
    placed = placement.prefer(batch_df, {0: "orders-0", 1: "orders-1"}, tag=f"{query}:{batch}")
    messages = placed.mapInArrow(ordered_stage, schema).collect()   # tasks prefer their executor
    ... commit the batch ...
    placement.commit(f"{query}:{batch}")     # remember where each key's state now lives

The jar ships inside the distribution (``orderedstream/jars/``); ``orderedstream shim-jar``
prints its path for ``spark-submit --jars``. Building it is development support
(``orderedstream.dev.shim``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orderedstream.core.errors import PlacementError

_log = logging.getLogger(__name__)
_warned = False

#: The shim's entry class (py4j).
ENTRY_CLASS = "orderedstream.shim.StickyPlacement"
#: Task local property the shim sets on executors: the id of the executor running the task.
EXECUTOR_ID_PROPERTY = "orderedstream.executor.id"

#: Where the built jar ships: ``orderedstream/jars/`` (resolved through an editable install's
#: links to the source tree, where the shim's build puts it).
JARS_DIR = Path(__file__).resolve().parent.parent / "jars"


def bundled_jar() -> Path | None:
    """The shim jar shipped inside this distribution, or None when it was not built."""
    jars = sorted(JARS_DIR.glob("orderedstream-shim-*.jar"))
    return jars[-1] if jars else None


def warn_once_missing() -> None:
    """Log once that placement falls back to Spark's scheduler."""
    global _warned
    if not _warned:
        _warned = True
        _log.warning("orderedstream JVM shim not on the classpath: state partitions are placed "
                     "by Spark's scheduler and restore from snapshots when they move. Build it "
                     "with 'python -m orderedstream.dev.shim build' and add the jar "
                     "'orderedstream shim-jar' prints to spark.jars.")


# --------------------------------------------------------------------------------------------
# Driver side: placement through py4j
# --------------------------------------------------------------------------------------------

def _entry_point(spark: Any) -> Any | None:
    """The JVM ``StickyPlacement`` for this session, or None (no jar, or no JVM: Spark Connect)."""
    jsession = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if jsession is None or jvm is None:
        return None
    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JError

    try:
        cls = jvm
        for part in ENTRY_CLASS.split("."):
            cls = getattr(cls, part)
        if not isinstance(cls, JavaClass):
            return None
        return cls.forSession(jsession)
    except Py4JError:
        return None


class Placement:
    """Executor-sticky placement of state partitions, for one SparkSession (driver only).

    State partitions are named by caller-chosen string keys (the ordered stage uses Kafka
    topic-partitions); the JVM side remembers key -> executor that last committed the key.
    Every method degrades to a no-op when the shim jar is not on the session's classpath
    (``available`` is False; a warning is logged once): placement is then Spark's.
    """

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._jplacement = _entry_point(spark)
        if self._jplacement is None:
            warn_once_missing()

    @property
    def available(self) -> bool:
        """True when the shim's JVM classes are on the session's classpath."""
        return self._jplacement is not None

    def version(self) -> str | None:
        """The loaded shim's version, or None without the shim."""
        if self._jplacement is None:
            return None
        return str(self._jplacement.version())

    def executors(self) -> dict[str, str]:
        """Executors the scheduler considers alive: executor id -> host ({} without the shim)."""
        if self._jplacement is None:
            return {}
        return {str(k): str(v) for k, v in self._jplacement.liveExecutors().items()}

    def prefer(self, df: Any, partition_keys: Mapping[int, str], *, tag: str) -> Any:
        """``df`` with a preferred executor for each partition that has a state key.

        ``partition_keys`` maps partition index -> state key; ``tag`` names this batch (unique
        per query, stage and batch id) for :meth:`commit`. Known keys prefer the executor that
        last committed them (if alive); others are spread evenly over live executors. Run the
        stage on the result with narrow operators (``mapInArrow``) so its tasks inherit the
        preference. Without the shim ``df`` is returned unchanged.
        """
        if self._jplacement is None:
            return df
        if not tag:
            raise PlacementError("tag must be a non-empty string naming the batch "
                                 "(e.g. '<query id>:<batch id>')")
        keys: dict[int, str] = {}
        for index, key in partition_keys.items():
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise PlacementError(f"partition index {index!r} (key {key!r}) must be an int "
                                     ">= 0, a partition of the DataFrame")
            if not isinstance(key, str) or not key:
                raise PlacementError(f"partition {index} has state key {key!r}: keys must be "
                                     "non-empty strings")
            keys[index] = key
        from pyspark.errors import IllegalArgumentException

        try:
            jdf = self._jplacement.prefer(df._jdf, keys, str(tag))
        except IllegalArgumentException as exc:
            raise PlacementError(str(exc).strip().splitlines()[0]) from exc
        from pyspark.sql.classic.dataframe import DataFrame

        return DataFrame(jdf, self._spark)

    def partition_count(self, df: Any) -> int:
        """How many partitions ``df``'s plan has (its tasks), without running it."""
        return int(df._jdf.queryExecution().toRdd().getNumPartitions())

    def planned(self, tag: str) -> dict[int, str]:
        """Partition index -> executor id that :meth:`prefer` chose for batch ``tag``."""
        if self._jplacement is None:
            return {}
        return {int(k): str(v) for k, v in self._jplacement.planned(str(tag)).items()}

    def observed(self, tag: str, timeout: float = 30.0) -> dict[int, str]:
        """Partition index -> executor id its successful task of batch ``tag`` ran on."""
        if self._jplacement is None:
            return {}
        seen = self._jplacement.observed(str(tag), int(timeout * 1000))
        return {int(k): str(v) for k, v in seen.items()}

    def commit(self, tag: str, timeout: float = 30.0) -> dict[str, str]:
        """After batch ``tag`` committed: remember where each key's task ran; returns key -> id.

        Waits (at most ``timeout`` seconds) for Spark's listener bus to deliver the batch's task
        events. Call it only for committed batches: a failed batch's state is not where it ran.
        """
        if self._jplacement is None:
            return {}
        learned = self._jplacement.commit(str(tag), int(timeout * 1000))
        return {str(k): str(v) for k, v in learned.items()}

    def commit_locations(self, executor_by_key: Mapping[str, str]) -> None:
        """Remember key -> executor id given by the caller (e.g. from its commit messages,
        where tasks put :func:`task_executor_id`)."""
        if self._jplacement is not None:
            self._jplacement.commitLocations({str(k): str(v) for k, v in executor_by_key.items()})

    def locations(self) -> dict[str, str]:
        """Key -> executor id that last committed it, as remembered now."""
        if self._jplacement is None:
            return {}
        return {str(k): str(v) for k, v in self._jplacement.locations().items()}

    def forget(self, prefix: str = "") -> None:
        """Forget the remembered executors of keys starting with ``prefix`` (all for "")."""
        if self._jplacement is not None:
            self._jplacement.forget(str(prefix))


def task_executor_id() -> str | None:
    """Executor side, inside a task of a stage placed by :meth:`Placement.prefer`: the id of
    the executor running it (set by the shim in the task's local properties), else None."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    value = context.getLocalProperty(EXECUTOR_ID_PROPERTY)
    return str(value) if value else None


def share_python_workers(spark: Any) -> bool:
    """Let the Python functions this driver creates (``mapInArrow``, UDFs, RDD functions) run
    in the Python workers Spark starts for Python Data Source reads: one daemon and one pool of
    idle workers instead of two, so a worker that read a source's partition serves the next
    stage. Spark keys its pools by the function's environment: a Data Source function carries
    only ``PYTHONPATH`` (Spark's Python path), pyspark's carry ``PYSPARK_PYTHON`` and
    ``PYTHONHASHSEED``. In local mode the workers inherit those two from the driver JVM with the
    same values, so they are left out and ``PYTHONPATH`` added: every worker's environment is
    what it was. True when shared; elsewhere (a cluster, other settings) nothing changes.
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
``java.nio`` instead of a ``chmod`` process per file (4 per micro-batch otherwise)."""
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
    rename: 16 processes per micro-batch for the offset and commit logs, 30-40 ms of each
    of ``walCommit`` and ``commitOffsets``. The ``FileSystem`` manager renames with
    ``java.io.File`` (atomic on a local disk) and starts none. Without Hadoop's native library
    (pyspark ships none) its filesystem still starts a ``chmod`` process for every file it
    creates (4-5 ms each, 4 per batch: the logs' files and their checksums); the shim's
    subclass of it (``FORKLESS_CHECKPOINT_MANAGER``, when the shim's jar is on the driver)
    sets the same modes without one."""
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

    Kept per gateway (one py4j round trip per package level, 0.7 ms, otherwise per call: the
    batch function asks every batch); a new session's gateway looks it up again."""
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
    ``plan_data_source_read``), each with its own ``pyspark.daemon`` and an idle forked worker:
    about 110 MiB of resident memory per module, kept until the SparkEnv stops although a
    streaming query plans only when it starts. The shim stops the pools whose workers are all
    idle, under the lock Spark takes to hand workers out; a later plan (a restarted query, a new
    query) starts them again. Without the shim (or without a JVM: Spark Connect) nothing
    happens and [] is returned.
    """
    cls = _shim_class(spark, PLANNER_WORKERS_CLASS)
    if cls is None:
        return []
    from py4j.protocol import Py4JError

    try:
        released = cls.releasePlanners()
        # By index, not by iterating: py4j ends an iteration with a Java exception whose
        # stack trace it fetches, 6-15 ms per batch for the usual empty list.
        return [str(released.get(i)) for i in range(released.size())]
    except Py4JError as exc:  # Spark internals changed: the pools stay, as without the shim
        _log.info("Spark's planner Python workers are kept: %s", str(exc).splitlines()[0])
        return []


def python_worker_pools(spark: Any) -> dict[str, int]:
    """Worker module -> live Python workers of each pool in the driver's SparkEnv ({} without
    the shim). For tests and diagnostics."""
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
    driver: 34 MiB for nothing. A NumPy value can only exist once ``numpy`` is imported, so the
    replacements look at ``sys.modules`` and convert exactly what the originals convert. Call
    before the session starts; idempotent. A change of the whole process's py4j: only the
    embedded local session calls it (``orderedstream.dev.embedded_session``);
    ``ORDEREDSTREAM_LAZY_PANDAS=0`` or no ``ORDEREDSTREAM_PROCESS_TUNING=1``: left as they
    are."""
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

