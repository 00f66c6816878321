"""What the driver ships to the ordered stage's tasks, and what each task sends back.

All small, frozen and JSON-serialisable: a commit travels back as one JSON string column of
the stage's result, and the driver stores the carried-forward map of bases in the batch's
commit record (``extra["ordered_state"]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from orderedstream.core.datafile import DataFile
from orderedstream.statestore.base import EMPTY_VERSION

EXTRA_KEY = "ordered_state"
FORMAT = 1


def partition_id(topic: str, partition: int) -> str:
    """Identity of a state partition: the Kafka topic-partition, ``<topic>/<partition>``.

    Parameters
    ----------
    topic
        The Kafka topic.
    partition
        The Kafka partition number.

    Returns
    -------
    str
        ``"<topic>/<partition>"``; :func:`split_partition_id` reads it back.

    Runs on
    -------
    both"""
    return f"{topic}/{int(partition)}"


def split_partition_id(pid: str) -> tuple[str, int]:
    """The topic and partition number of a :func:`partition_id` (the topic may hold ``/``).

    Parameters
    ----------
    pid
        ``"<topic>/<partition>"``.

    Returns
    -------
    tuple[str, int]
        ``(topic, partition)``.

    Raises
    ------
    ValueError
        The part after the last ``/`` is not a number.

    Runs on
    -------
    both"""
    topic, _, number = pid.rpartition("/")
    return topic, int(number)


@dataclass(frozen=True)
class PartitionBase:
    """The published state of one Kafka partition as of some batch."""

    version: int = EMPTY_VERSION
    manifest: str | None = None
    last_offset: int | None = None
    max_event_ms: int | None = None
    next_timeout_ms: int | None = None
    executor: str | None = None
    num_keys: int | None = None
    state_bytes: int | None = None
    """Size of the files the version references (None: committed before this was kept)."""

    def to_dict(self) -> dict[str, Any]:
        """The base as a JSON-ready dict of its fields (:meth:`from_dict` reads it back).

        Returns
        -------
        dict[str, Any]
            Field name -> value.

        Runs on
        -------
        both"""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionBase:
        """A base from :meth:`to_dict`'s dict; unknown keys are ignored, missing get defaults.

        Parameters
        ----------
        data
            The stored dict (records written before a field existed lack it).

        Returns
        -------
        PartitionBase
            The base.

        Runs on
        -------
        both"""
        fields: dict[str, Any] = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**fields)


@dataclass(frozen=True)
class BatchPlan:
    """Driver -> tasks: which state every partition starts from in batch ``batch_id``.

    ``timeout_only`` lists partitions with no records in this batch that still have a due
    timeout; the stage gets one extra task per such partition.
    """

    batch_id: int
    processing_time_ms: int
    bases: Mapping[str, PartitionBase] = field(default_factory=dict)
    timeout_only: tuple[str, ...] = ()

    def base(self, pid: str) -> PartitionBase:
        """The state a Kafka partition starts this batch from.

        Parameters
        ----------
        pid
            The Kafka partition's id (:func:`partition_id`).

        Returns
        -------
        PartitionBase
            Its base, or an empty one (no state yet) for a partition not in ``bases``.

        Runs on
        -------
        both"""
        return self.bases.get(pid) or PartitionBase()


@dataclass(frozen=True)
class PartitionCommit:
    """Task -> driver: the result of processing one Kafka partition in one batch."""

    partition_id: str
    batch_id: int
    files: tuple[dict[str, Any], ...]
    candidate: str
    """``CommitCandidate.to_json()`` of the state candidate for version ``batch_id``."""
    manifest: str
    first_offset: int | None
    last_offset: int | None
    records: int
    output_rows: int
    timeouts: int
    max_event_ms: int | None
    next_timeout_ms: int | None
    num_keys: int | None
    executor: str | None
    task_attempt: str
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The commit as JSON text, the stage's ``commit`` column (:meth:`from_json` reads it).

        Returns
        -------
        str
            Key-sorted JSON of every field.

        Runs on
        -------
        executor"""
        # Field by field: asdict deep-copies ``files`` and ``metrics`` only to be read.
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["files"] = list(self.files)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PartitionCommit:
        """A commit from :meth:`to_json`'s text.

        Parameters
        ----------
        text
            The JSON a task sent back.

        Returns
        -------
        PartitionCommit
            The commit.

        Raises
        ------
        ValueError
            ``text`` is not JSON.
        TypeError
            Its fields are not a commit's.

        Runs on
        -------
        driver"""
        data = json.loads(text)
        data["files"] = tuple(data["files"])
        return cls(**data)

    def data_files(self) -> tuple[DataFile, ...]:
        """The output files this task wrote, as the descriptors a commit record lists."""
        return tuple(DataFile.from_dict(f) for f in self.files)

    def as_base(self) -> PartitionBase:
        """The base the next batch starts this Kafka partition from, once this is committed.

        Returns
        -------
        PartitionBase
            Version ``batch_id`` with this commit's manifest, offsets, timeouts and sizes.

        Runs on
        -------
        driver"""
        return PartitionBase(version=self.batch_id, manifest=self.manifest,
                             last_offset=self.last_offset, max_event_ms=self.max_event_ms,
                             next_timeout_ms=self.next_timeout_ms, executor=self.executor,
                             num_keys=self.num_keys, state_bytes=self.state_bytes())

    def state_bytes(self) -> int | None:
        """Size of the state version this task prepared (all files it references)."""
        value = (self.metrics.get("state") or {}).get("bytes_total")
        return None if value is None else int(value)


def bases_from_extra(extra: Mapping[str, Any] | None) -> dict[str, PartitionBase]:
    """The carried-forward partition map stored in a commit record's ``extra``.

    Parameters
    ----------
    extra
        The record's ``extra`` (from :func:`extra_for`), or ``None``.

    Returns
    -------
    dict[str, PartitionBase]
        Kafka partition id -> base; empty when the record carries none.

    Runs on
    -------
    driver"""
    section = (extra or {}).get(EXTRA_KEY) or {}
    return {pid: PartitionBase.from_dict(data)
            for pid, data in (section.get("partitions") or {}).items()}


def extra_for(bases: Mapping[str, PartitionBase], batch_id: int,
              commits: list[PartitionCommit], *, processing_time_ms: int | None = None,
              replay: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``extra`` of a batch's commit record.

    The full partition map is carried forward, so loading any partition's latest state reads
    one record; per-task stats and output files come with it.

    Parameters
    ----------
    bases
        Every Kafka partition's base after the batch (:func:`advance`).
    batch_id
        The batch committed.
    commits
        The batch's partition commits.
    processing_time_ms
        The plan's clock, which processing-time timeouts compare against (for an exact
        replay).
    replay
        How to rebuild the function and options (``ordered.replay_spec``), or ``None``.

    Returns
    -------
    dict[str, Any]
        ``{"ordered_state": {...}}`` for the commit record.

    Runs on
    -------
    driver"""
    return {EXTRA_KEY: {
        "format": FORMAT,
        "batch_id": batch_id,
        "processing_time_ms": processing_time_ms,
        "replay": dict(replay or {}),
        "partitions": {pid: base.to_dict() for pid, base in sorted(bases.items())},
        "updated": sorted(c.partition_id for c in commits),
        "tasks": {c.partition_id: {"executor": c.executor, "task_attempt": c.task_attempt,
                                   "records": c.records, "output_rows": c.output_rows,
                                   "timeouts": c.timeouts, "first_offset": c.first_offset,
                                   "last_offset": c.last_offset, "metrics": c.metrics,
                                   "files": [str(f["path"]) for f in c.files]}
                  for c in commits},
    }}


def advance(bases: Mapping[str, PartitionBase], commits: list[PartitionCommit]
            ) -> dict[str, PartitionBase]:
    """The partition map after a batch: committed partitions move to their new version.

    Parameters
    ----------
    bases
        The map before the batch.
    commits
        The batch's partition commits.

    Returns
    -------
    dict[str, PartitionBase]
        A new map; ``bases`` is not changed.

    Runs on
    -------
    driver"""
    out = dict(bases)
    for commit in commits:
        out[commit.partition_id] = commit.as_base()
    return out


__all__ = ["EXTRA_KEY", "BatchPlan", "PartitionBase", "PartitionCommit", "advance",
           "bases_from_extra", "extra_for", "partition_id", "split_partition_id"]
