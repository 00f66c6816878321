"""The source's offset: what Spark writes to the query checkpoint for every micro-batch.

Readable JSON (Spark compares offsets as ``json.dumps`` strings, so keys are always emitted in
sorted order)::

    {"offsets": {"sessions-a": {"0": 120, "1": 98}},      # topic -> partition -> NEXT offset
     "topicIds": {"sessions-a": "k3Xv..."},                # Kafka topic id per topic
     "newPartitions": {"sessions-b": {"0": 0}},            # first offset of partitions new in
                                                           # this batch (read from here)
     "loss": {"events": 0, "records": 0}}                  # cumulative loss seen (window/none)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orderedstream.core.errors import OptionError

TopicPartitionOffsets = Mapping[str, Mapping[int, int]]


def _dump(tpo: TopicPartitionOffsets) -> dict[str, dict[str, int]]:
    return {t: {str(p): int(tpo[t][p]) for p in sorted(tpo[t])} for t in sorted(tpo)}


def _load(raw: Mapping[str, Any]) -> dict[str, dict[int, int]]:
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}


@dataclass(frozen=True, kw_only=True)
class KafkaSourceOffset:
    """One position of the whole source: next offset per topic-partition plus what the
    integrity checks need (topic ids, first offsets of newly found partitions, loss counters)."""

    offsets: TopicPartitionOffsets = field(default_factory=dict)
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    new_partitions: TopicPartitionOffsets = field(default_factory=dict)
    loss_events: int = 0
    loss_records: int = 0

    def to_json(self) -> dict[str, Any]:
        """The dict handed to Spark (primitive leaves, deterministic key order)."""
        return {
            "offsets": _dump(self.offsets),
            "topicIds": {t: self.topic_ids[t] for t in sorted(self.topic_ids)},
            "newPartitions": _dump(self.new_partitions),
            "loss": {"events": int(self.loss_events), "records": int(self.loss_records)},
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> KafkaSourceOffset:
        """Parse what :meth:`to_json` produced (from Spark or a checkpoint).

        Parameters
        ----------
        raw
            The offset's JSON object, parsed.

        Returns
        -------
        KafkaSourceOffset
            The offset.

        Raises
        ------
        OptionError
            ``raw`` is not an object with ``offsets``.
        ValueError
            A partition or offset is not an integer.

        Runs on
        -------
        driver
        """
        if not isinstance(raw, Mapping) or "offsets" not in raw:
            raise OptionError(f"not an orderedkafka offset (expected an object with 'offsets', "
                              f"'topicIds'): {str(raw)[:200]}")
        loss = raw.get("loss") or {}
        return cls(offsets=_load(raw["offsets"]), topic_ids=dict(raw.get("topicIds") or {}),
                   new_partitions=_load(raw.get("newPartitions") or {}),
                   loss_events=int(loss.get("events", 0)),
                   loss_records=int(loss.get("records", 0)))

    def partitions(self) -> set[tuple[str, int]]:
        """Every (topic, partition) this offset covers."""
        return {(t, p) for t, parts in self.offsets.items() for p in parts}

    def get(self, topic: str, partition: int) -> int | None:
        """Next offset of ``topic``-``partition``, or None when not tracked.

        Parameters
        ----------
        topic
            The topic.
        partition
            The partition number.

        Runs on
        -------
        driver
        """
        return self.offsets.get(topic, {}).get(partition)

    def total(self) -> int:
        """Sum of next offsets (for progress arithmetic)."""
        return sum(o for parts in self.offsets.values() for o in parts.values())
