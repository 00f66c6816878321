"""What the driver ships to the ordered stage's tasks, and what each task sends back.

- ``PartitionBase``: the committed state of one Kafka partition a batch starts from (its
  version, manifest, last offset, event-time high-water mark, earliest key timeout).
- ``BatchPlan``: the batch id, its processing time and the bases of every known partition.
- ``PartitionCommit``: one task's result for one Kafka partition: output files, the state
  candidate (attempt-unique manifest), offsets seen, the executor that ran it.

All are small, frozen and JSON-serialisable: the plan travels in the task closure (pickled), a
commit travels back as one JSON string column of the stage's result, and the driver stores the
carried-forward map of bases in the batch's commit record (``extra["ordered_state"]``).
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
    """Identity of a state partition: the Kafka topic-partition, ``<topic>/<partition>``."""
    return f"{topic}/{int(partition)}"


def split_partition_id(pid: str) -> tuple[str, int]:
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
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionBase:
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
        # Field by field: asdict deep-copies ``files`` and ``metrics`` only to be read.
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["files"] = list(self.files)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PartitionCommit:
        data = json.loads(text)
        data["files"] = tuple(data["files"])
        return cls(**data)

    def data_files(self) -> tuple[DataFile, ...]:
        """The output files this task wrote, as the descriptors a commit record lists."""
        return tuple(DataFile.from_dict(f) for f in self.files)

    def as_base(self) -> PartitionBase:
        return PartitionBase(version=self.batch_id, manifest=self.manifest,
                             last_offset=self.last_offset, max_event_ms=self.max_event_ms,
                             next_timeout_ms=self.next_timeout_ms, executor=self.executor,
                             num_keys=self.num_keys, state_bytes=self.state_bytes())

    def state_bytes(self) -> int | None:
        """Size of the state version this task prepared (all files it references)."""
        value = (self.metrics.get("state") or {}).get("bytes_total")
        return None if value is None else int(value)


def bases_from_extra(extra: Mapping[str, Any] | None) -> dict[str, PartitionBase]:
    """The carried-forward partition map stored in a commit record's ``extra``."""
    section = (extra or {}).get(EXTRA_KEY) or {}
    return {pid: PartitionBase.from_dict(data)
            for pid, data in (section.get("partitions") or {}).items()}


def extra_for(bases: Mapping[str, PartitionBase], batch_id: int,
              commits: list[PartitionCommit], *, processing_time_ms: int | None = None,
              replay: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``extra`` of batch ``batch_id``'s commit record: the full partition map (carried
    forward, so loading any partition's latest state reads ONE record) plus per-task stats
    and output files. ``processing_time_ms`` (the plan's clock, which processing-time
    timeouts compare against) and ``replay`` (how to rebuild the function and options,
    ``orderedstream.statestore.ordered.replay_spec``) let a replay of the batch be exact."""
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
    """The partition map after a batch: committed partitions move to their new version."""
    out = dict(bases)
    for commit in commits:
        out[commit.partition_id] = commit.as_base()
    return out


__all__ = ["EXTRA_KEY", "BatchPlan", "PartitionBase", "PartitionCommit", "advance",
           "bases_from_extra", "extra_for", "partition_id", "split_partition_id"]
