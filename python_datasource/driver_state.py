"""The driver-side state the ``orderedkafka`` batch and stream readers share: the Kafka
metadata client, snapshots of the subscription and the resolution of ``startingOffsets*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orderedstream.core.errors import OptionError
from orderedstream.python_datasource.kafka_metadata import (
    TP,
    KafkaMetadata,
    TopicInfo,
    resolve_spec,
)
from orderedstream.python_datasource.options import OrderedKafkaOptions
from orderedstream.python_datasource.planning import Loss, Snapshot, enforce


class DriverState:
    """Driver-only helpers shared by the batch and stream readers: the Kafka metadata client
    and the start offsets. Pickled, only the options travel (``__getstate__``)."""

    options: OrderedKafkaOptions
    _metadata: KafkaMetadata | None

    @property
    def metadata(self) -> KafkaMetadata:
        """The driver's Kafka metadata client, opened at first use and kept."""
        if self._metadata is None:
            self._metadata = KafkaMetadata(self.options)
        return self._metadata

    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel to executors (secrets included: Spark's own channel to its
        tasks, never rows or the checkpoint); clients and caches stay on the driver."""
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def snapshot(self, topics: Mapping[str, TopicInfo]) -> Snapshot:
        """Kafka now for ``topics``: their partitions' earliest and latest offsets.

        Parameters
        ----------
        topics
            The subscription's topics, as discovered.

        Returns
        -------
        Snapshot
            The topics with each partition's log start and end.

        Runs on
        -------
        driver"""
        tps = [(t, p) for t, info in sorted(topics.items()) for p in info.partitions]
        return Snapshot(topics, self.metadata.earliest(tps), self.metadata.latest(tps))

    def starting_offsets(self, snap: Snapshot) -> dict[TP, int]:
        """Resolve startingOffsets* into offsets; a start below the log start is loss. An
        ``assign`` naming a partition that does not exist is refused (as Spark's source fails
        listing its offsets), never read as empty.

        Parameters
        ----------
        snap
            Kafka now (:meth:`snapshot` of the subscription's topics).

        Returns
        -------
        dict[TP, int]
            Each partition's first offset to read (raised to the log start after a loss).

        Raises
        ------
        OptionError
            ``assign`` names a partition the cluster lacks, or a start is past the log end.
        DataLossError
            Integrity 'strict' and a requested start was deleted by retention.

        Runs on
        -------
        driver"""
        if self.options.strategy == "assign":
            missing = [(t, p) for t, parts in sorted(self.options.assignment.items())
                       for p in parts if p not in (snap.topics[t].partitions
                                                   if t in snap.topics else ())]
            if missing:
                have = "; ".join(f"{t} has partitions {list(snap.topics[t].partitions)}"
                                 if t in snap.topics else f"topic {t!r} does not exist"
                                 for t in sorted({t for t, _ in missing}))
                named = ", ".join(f"{t}-{p}" for t, p in missing)
                raise OptionError(f"option 'assign' names {named}, which the "
                                  f"cluster at {self.options.bootstrap_servers} does not have "
                                  f"({have}); assign existing partitions, or subscribe")
        tps = [tp for tp in snap.partitions() if tp in snap.latest]
        start = resolve_spec(self.metadata, self.options.starting, tps, snap.earliest,
                             snap.latest, self.options.starting_by_timestamp_strategy)
        losses = []
        for tp, off in sorted(start.items()):
            if off > snap.latest[tp]:
                raise OptionError(f"option '{self.options.starting.option}': offset {off} for "
                                  f"{tp[0]}-{tp[1]} is beyond the log end {snap.latest[tp]}")
            if off < snap.earliest[tp]:
                losses.append(Loss(tp[0], tp[1], "the requested start was deleted by "
                                   f"retention (log starts at {snap.earliest[tp]})",
                                   off, snap.earliest[tp]))
                start[tp] = snap.earliest[tp]
        enforce(losses, self.options.integrity, "starting offsets")
        return start


__all__ = ["DriverState"]
