"""Where the ordered stage's state partitions run: executor ids, and executor-sticky placement.

Executor side, :func:`executor_id` / :func:`spark_executor_id` say which executor runs a task.
Driver side, :class:`StatePlacement` makes each Kafka partition's task prefer the executor that
committed its state last (through the JVM shim), so its local RocksDB copy is reused instead of
restored. Placement only saves restores: it never changes what is computed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orderedstream.core.sparkmode import is_connect

_log = logging.getLogger(__name__)

#: Placement modes accepted by ``OrderedStateful(placement=...)``.
PLACEMENT_MODES = ("auto", "off")


# --------------------------------------------------------------------------------------------
# Executor side
# --------------------------------------------------------------------------------------------

def executor_id() -> str | None:
    """``<host>/<executor id>`` of the executor running this Python worker, or None.

    A standalone-cluster executor runs in ``<worker work dir>/<app id>/<executor id>`` and its
    Python workers inherit that working directory; elsewhere (local mode, YARN, k8s) the
    ``SPARK_EXECUTOR_ID``-style variables are tried. The host name keeps ids unique across
    machines. Returns None when nothing says which it is.
    """
    host = socket.gethostname()
    for name in ("SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_POD_NAME", "CONTAINER_ID"):
        value = os.environ.get(name)
        if value:
            return f"{host}/{value}"
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    parent, leaf = os.path.split(cwd)
    if leaf.isdigit() and os.path.basename(parent).startswith("app-"):
        return f"{host}/{leaf}"
    return None


def spark_executor_id() -> str | None:
    """Executor side: Spark's own id of this task's executor (e.g. ``"1"``) when the task
    belongs to a stage placed by the shim, else None. It is what the driver's placement
    remembers per state partition."""
    from orderedstream.core.jvm import task_executor_id

    return task_executor_id()


def _local_master(spark: Any) -> bool:
    try:
        return str(spark.sparkContext.master).startswith("local")
    except Exception:  # noqa: BLE001 - no SparkContext here (Spark Connect): not local mode
        return False


def spark_partition_index() -> int | None:
    """Executor side: the Spark partition index of the running task (None outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return None if context is None else int(context.partitionId())


# --------------------------------------------------------------------------------------------
# Driver side: the query's offset log -> partition index -> Kafka topic-partition
# --------------------------------------------------------------------------------------------

class OffsetLogMismatch(Exception):
    """The offset log does not give this batch's partition mapping (placement is skipped)."""


def _filesystem(location: str, storage_options: Mapping[str, Any]) -> tuple[Any, str]:
    """fsspec filesystem and root path of a checkpoint (local path, file:, s3:, s3a:, ...)."""
    import fsspec

    if "://" not in location and not location.startswith("file:"):
        return fsspec.filesystem("file"), os.path.abspath(location)
    if location.startswith("file:") and "://" not in location:  # Hadoop's file:/path
        return fsspec.filesystem("file"), location[len("file:"):]
    if location.startswith(("s3a://", "s3n://")):
        location = "s3://" + location.split("://", 1)[1]
    from orderedstream.core.storage import url_to_fs

    local = location.startswith("file://")
    fs, root = url_to_fs(location, {} if local else storage_options)
    return fs, root.rstrip("/")


def _source_offsets(fs: Any, path: str) -> list[str]:
    """The per-source offset lines of one offset-log entry (``v1``, metadata, sources)."""
    with fs.open(path, "rb") as handle:
        lines = handle.read().decode("utf-8").splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise OffsetLogMismatch(f"{path} is not a Spark offset-log entry (starts {lines[:1]})")
    return lines[2:]


def kafka_partition_order(checkpoint: str, batch_id: int,
                          storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The Kafka partition of each of a batch's Spark input partitions, in partition order.

    The ``orderedkafka`` source plans one range per topic-partition with data, sorted by
    (topic, partition), from the batch's start and end offsets. Spark writes batch N's end
    offsets to ``<checkpoint>/offsets/<N>`` before the batch runs (its start is
    ``offsets/<N-1>``), so the mapping is recomputed here exactly as the source planned it.

    Parameters
    ----------
    checkpoint
        The query's ``checkpointLocation`` (local path, ``file:``, ``s3://``, ``s3a://``, ...).
    batch_id
        The batch whose mapping is wanted.
    storage_options
        fsspec options to read a remote checkpoint with.

    Returns
    -------
    list[str]
        Topic-partition ids (``<topic>/<partition>``), index ``i`` for Spark partition ``i``.

    Raises
    ------
    OffsetLogMismatch
        The mapping cannot be known for sure: no entry for the batch, no previous entry (the
        first batch), several sources, or an offset that is not orderedkafka's.

    Runs on
    -------
    driver
    """
    from orderedstream.python_datasource.offsets import KafkaSourceOffset
    from orderedstream.python_datasource.planning import plan_ranges
    from orderedstream.statestore.ordered.plan import partition_id

    fs, root = _filesystem(checkpoint, storage_options or {})
    end_path = f"{root}/offsets/{batch_id}"
    start_path = f"{root}/offsets/{batch_id - 1}"
    if not fs.exists(end_path):
        raise OffsetLogMismatch(f"no offset-log entry {end_path}: is {checkpoint!r} this "
                                "query's checkpointLocation?")
    ends = _source_offsets(fs, end_path)
    if len(ends) != 1:
        raise OffsetLogMismatch(f"{end_path} has {len(ends)} sources; placement needs a query "
                                "with exactly one orderedkafka source")
    if batch_id == 0 or not fs.exists(start_path):
        raise OffsetLogMismatch(f"batch {batch_id} has no previous offset-log entry "
                                f"({start_path}): its start offsets are unknown")
    starts = _source_offsets(fs, start_path)
    if len(starts) != 1 or starts[0] == "-" or ends[0] == "-":
        raise OffsetLogMismatch(f"{start_path} / {end_path}: no single source offset")
    try:
        start = KafkaSourceOffset.from_json(json.loads(starts[0]))
        end = KafkaSourceOffset.from_json(json.loads(ends[0]))
    except Exception as exc:  # noqa: BLE001 - any other source's offset
        raise OffsetLogMismatch(f"{end_path}: not an orderedkafka offset ({exc})") from exc
    # Integrity 'strict'/'window' plan one range per topic-partition; 'none' may split ranges,
    # which the ordered stage refuses anyway (one task per Kafka partition is required).
    return [partition_id(r.topic, r.partition) for r in plan_ranges(start, end, "window")]


# --------------------------------------------------------------------------------------------
# Driver side: preferences and what was learned
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchPlacement:
    """The preference given to one batch: its shim tag and partition index -> Kafka partition,
    plus the executor id planned per Kafka partition."""

    tag: str
    partitions: Mapping[int, str]
    planned: Mapping[str, str]


class StatePlacement:
    """Driver side, one per ``OrderedStateful``: prefers, per batch, the executor that last
    committed each Kafka partition's state, and learns from the batch's commit messages where
    the state is now. Every failure to place degrades to Spark's own placement (logged once).
    """

    def __init__(self, *, checkpoint_location: str | None, mode: str, key_prefix: str,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.checkpoint_location = checkpoint_location
        self.mode = mode
        self.key_prefix = key_prefix
        self.storage_options = dict(storage_options or {})
        self._placement: Any = None
        self._session: Any = None
        self._warned: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        # The py4j handles stay on the driver that made them (picklable for Spark Connect).
        return {**self.__dict__, "_placement": None, "_session": None}

    def _warn_once(self, kind: str, message: str, *args: Any) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            _log.warning("ordered stage placement: " + message, *args)
        else:
            _log.debug("ordered stage placement: " + message, *args)

    def key(self, pid: str) -> str:
        """The shim's state key of a Kafka partition (unique to this state location).

        Parameters
        ----------
        pid
            The Kafka partition's id, ``<topic>/<partition>``.

        Returns
        -------
        str
            ``<key_prefix>#<pid>``.

        Runs on
        -------
        driver"""
        return f"{self.key_prefix}#{pid}"

    def _shim(self, spark: Any) -> Any | None:
        """The session's ``Placement`` when it can place here (shim present, not local mode)."""
        if self.mode == "off" or self.checkpoint_location is None:
            return None
        if is_connect(spark):  # no JVM to reach the shim through: Spark's own placement
            self._warn_once("connect", "Spark Connect session: each batch is placed by Spark "
                            "(the JVM shim's executor-sticky placement needs a classic "
                            "session); state is still correct, only not kept on one executor")
            return None
        if self._session is not spark:
            from orderedstream.core.jvm import Placement

            # one executor (the driver) on a local master: nothing to choose, no shim to find
            self._session = spark
            self._placement = None if _local_master(spark) else Placement(spark)
        placement = self._placement
        if placement is None or not placement.available:
            return None
        return placement

    def places(self, spark: Any) -> bool:
        """Whether batches would be placed on ``spark``.

        Parameters
        ----------
        spark
            The session the batches run on.

        Returns
        -------
        bool
            True with ``placement="auto"``, a checkpoint location, a classic session on a
            cluster (not local mode) and the JVM shim loaded.

        Runs on
        -------
        driver"""
        return self._shim(spark) is not None

    def _partition_order(self, frame: Any, batch_id: int, checkpoint: str) -> list[str] | None:
        """Kafka partition per Spark partition index of this batch (from the offset log at
        ``checkpoint``), or None (logged once)."""
        try:
            order = kafka_partition_order(checkpoint, batch_id, self.storage_options)
        except OffsetLogMismatch as exc:
            if batch_id > 0:
                self._warn_once("offsets", "batch %d placed by Spark: %s", batch_id, exc)
            return None
        except Exception as exc:  # noqa: BLE001 - placement must never fail a batch
            self._warn_once("offsets", "batch %d placed by Spark: reading the offset log of "
                            "%s failed: %r", batch_id, checkpoint, exc)
            return None
        try:
            count = self._placement.partition_count(frame)
        except Exception as exc:  # noqa: BLE001
            self._warn_once("count", "batch %d placed by Spark: no partition count (%r)",
                            batch_id, exc)
            return None
        if count != len(order):
            self._warn_once("count", "batch %d placed by Spark: the offset log gives %d Kafka "
                            "partitions with data but the batch has %d Spark partitions",
                            batch_id, len(order), count)
            return None
        return order

    def prefer(self, frame: Any, batch_id: int) -> tuple[Any, BatchPlacement | None]:
        """``frame`` with each Kafka partition's task preferring its state's executor.

        When the partition mapping is unknown (e.g. batch 0) the frame still goes through the
        shim with no preferences: its tasks then report Spark's executor id, so the next batch
        is placed where this one committed. A failure to place is logged once, never raised.

        Parameters
        ----------
        frame
            The batch's input DataFrame.
        batch_id
            The batch being planned.

        Returns
        -------
        tuple[Any, BatchPlacement | None]
            The frame to run (``frame`` itself when not placed) and the placement given
            (``None`` when the shim is not used for this batch).

        Runs on
        -------
        driver
        """
        checkpoint = self.checkpoint_location
        placement = self._shim(frame.sparkSession)
        if placement is None or checkpoint is None:
            return frame, None
        order = self._partition_order(frame, batch_id, checkpoint)
        partitions = dict(enumerate(order or []))
        tag = f"{self.key_prefix}:{batch_id}"
        try:
            placed = placement.prefer(frame, {i: self.key(p) for i, p in partitions.items()},
                                      tag=tag)
            planned = placement.planned(tag)
        except Exception as exc:  # noqa: BLE001
            self._warn_once("prefer", "batch %d placed by Spark: the shim refused (%r)",
                            batch_id, exc)
            return frame, None
        return placed, BatchPlacement(tag, partitions,
                                      {partitions[i]: e for i, e in planned.items()})

    def committed(self, given: BatchPlacement | None, commits: Iterable[Any]) -> None:
        """Remember the executor each Kafka partition's state was committed on.

        Called once the batch's commit record exists; a task that ran another Kafka
        partition than the mapping said is logged (output unaffected).

        Parameters
        ----------
        given
            The placement :meth:`prefer` gave the batch, or ``None`` (nothing to learn).
        commits
            The batch's partition commits, with their tasks' reported executor and index.

        Runs on
        -------
        driver"""
        if given is None or self._placement is None:
            return
        learned: dict[str, str] = {}
        for commit in commits:
            executor = commit.metrics.get("spark_executor_id")
            if executor:
                learned[self.key(commit.partition_id)] = str(executor)
            index = commit.metrics.get("spark_partition")
            if index is not None and given.partitions.get(int(index), commit.partition_id) \
                    != commit.partition_id:
                self._warn_once("mapping", "batch tag %s: Spark partition %s held Kafka %s, "
                                "the offset log said %s; preferences were wrong for this "
                                "batch (output unaffected)", given.tag, index,
                                commit.partition_id, given.partitions.get(int(index)))
        if learned:
            self._placement.commit_locations(learned)


__all__ = ["PLACEMENT_MODES", "BatchPlacement", "OffsetLogMismatch", "StatePlacement",
           "executor_id", "kafka_partition_order", "spark_executor_id", "spark_partition_index"]
