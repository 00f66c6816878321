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

        Known keys prefer the executor that last committed them (if alive); others are spread
        evenly over live executors. Run the stage on the result with narrow operators
        (``mapInArrow``) so its tasks inherit the preference.

        Parameters
        ----------
        df
            The batch's DataFrame (classic, not Spark Connect).
        partition_keys
            Partition index (an int >= 0) -> state key (a non-empty string).
        tag
            Names this batch for :meth:`commit`: unique per query, stage and batch id.

        Returns
        -------
        DataFrame
            The placed DataFrame; ``df`` unchanged without the shim.

        Raises
        ------
        PlacementError
            ``tag`` is empty, an index is not an int >= 0, a key is not a non-empty string, or the
            shim refuses the request (e.g. an index the DataFrame does not have).

        Runs on
        -------
        driver
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
        """How many partitions ``df``'s plan has (its tasks), without running it.

        Parameters
        ----------
        df
            A classic DataFrame.

        Returns
        -------
        int
            The partition count of its physical plan's RDD.

        Runs on
        -------
        driver
        """
        return int(df._jdf.queryExecution().toRdd().getNumPartitions())

    def planned(self, tag: str) -> dict[int, str]:
        """The executors :meth:`prefer` chose for batch ``tag``.

        Parameters
        ----------
        tag
            The batch's tag given to :meth:`prefer`.

        Returns
        -------
        dict[int, str]
            Partition index -> executor id; {} without the shim.

        Runs on
        -------
        driver
        """
        if self._jplacement is None:
            return {}
        return {int(k): str(v) for k, v in self._jplacement.planned(str(tag)).items()}

    def observed(self, tag: str, timeout: float = 30.0) -> dict[int, str]:
        """The executors the successful tasks of batch ``tag`` ran on, as Spark's listener reported.

        Parameters
        ----------
        tag
            The batch's tag given to :meth:`prefer`.
        timeout
            Seconds to wait for the listener bus to deliver the batch's task events.

        Returns
        -------
        dict[int, str]
            Partition index -> executor id; {} without the shim.

        Runs on
        -------
        driver
        """
        if self._jplacement is None:
            return {}
        seen = self._jplacement.observed(str(tag), int(timeout * 1000))
        return {int(k): str(v) for k, v in seen.items()}

    def commit(self, tag: str, timeout: float = 30.0) -> dict[str, str]:
        """After batch ``tag`` committed, remember where each key's task ran.

        Call it only for committed batches: a failed batch's state is not where it ran.

        Parameters
        ----------
        tag
            The batch's tag given to :meth:`prefer`.
        timeout
            Seconds to wait at most for Spark's listener bus to deliver the batch's task events.

        Returns
        -------
        dict[str, str]
            State key -> executor id learned; {} without the shim.

        Runs on
        -------
        driver
        """
        if self._jplacement is None:
            return {}
        learned = self._jplacement.commit(str(tag), int(timeout * 1000))
        return {str(k): str(v) for k, v in learned.items()}

    def commit_locations(self, executor_by_key: Mapping[str, str]) -> None:
        """Remember the executors the caller gives (e.g. from its commit messages, where tasks put
        :func:`task_executor_id`). Nothing happens without the shim.

        Parameters
        ----------
        executor_by_key
            State key -> executor id.

        Runs on
        -------
        driver
        """
        if self._jplacement is not None:
            self._jplacement.commitLocations({str(k): str(v) for k, v in executor_by_key.items()})

    def locations(self) -> dict[str, str]:
        """Key -> executor id that last committed it, as remembered now."""
        if self._jplacement is None:
            return {}
        return {str(k): str(v) for k, v in self._jplacement.locations().items()}

    def forget(self, prefix: str = "") -> None:
        """Forget the remembered executors of keys starting with ``prefix``. Nothing happens without
        the shim.

        Parameters
        ----------
        prefix
            The key prefix; "" forgets every key.

        Runs on
        -------
        driver
        """
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
