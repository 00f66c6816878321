"""Offset arithmetic on the driver: the next end offset, integrity checks, admission control and
the split into input partitions. Pure functions over plain data (no Kafka calls here).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from orderedstream.core.errors import DataLossError
from orderedstream.python_datasource.kafka_metadata import TP, TopicInfo
from orderedstream.python_datasource.offsets import KafkaSourceOffset
from orderedstream.python_datasource.options import Integrity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one topic-partition, read by one task in offset order.

    Crosses to executors inside the input partition (plain picklable data). ``strict`` makes
    the reader fail on any loss instead of logging it.
    """

    topic: str
    partition: int
    start: int
    end: int
    strict: bool = True

    @property
    def size(self) -> int:
        """How many offsets the range spans (0 when it is empty)."""
        return max(0, self.end - self.start)

    def describe(self) -> str:
        """The range as error and log messages name it: ``topic-partition [start, end)``."""
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


@dataclass(frozen=True)
class Loss:
    """Records that should have been read but cannot be: where, which offsets, and why."""

    topic: str
    partition: int | None
    reason: str
    start: int | None = None
    end: int | None = None

    @property
    def records(self) -> int:
        """How many offsets are known to be lost (0 when the extent is unknown)."""
        if self.start is None or self.end is None:
            return 0
        return max(0, self.end - self.start)

    def describe(self) -> str:
        """The loss as messages name it: where, the offsets when known, and why."""
        where = self.topic if self.partition is None else f"{self.topic}-{self.partition}"
        span = "" if self.start is None else f" offsets [{self.start}, " \
            f"{'?' if self.end is None else self.end})"
        return f"{where}{span}: {self.reason}"


def enforce(losses: list[Loss], integrity: Integrity, where: str) -> None:
    """Strict: raise one DataLossError listing every loss. Window/none: log each and go on.

    Parameters
    ----------
    losses
        The losses found (nothing happens when empty).
    integrity
        The query's option ``integrity``.
    where
        What found them, for the message (e.g. ``"planning the next batch"``).

    Raises
    ------
    DataLossError
        ``integrity`` is ``"strict"`` and ``losses`` is not empty; the message lists each loss
        and how to go on.

    Runs on
    -------
    driver and executor"""
    if not losses:
        return
    text = "; ".join(loss.describe() for loss in losses)
    if integrity == "strict":
        raise DataLossError(
            f"orderedkafka ({where}): Kafka data that this query has not read is gone: {text}. "
            "The query stops so nothing is skipped silently; to continue past the loss restart "
            "with option integrity='window' (or failOnDataLoss='false'), or from a new checkpoint")
    for loss in losses:
        log.warning("orderedkafka data loss (%s, integrity=%s): %s", where, integrity,
                    loss.describe())


@dataclass(frozen=True)
class Snapshot:
    """What Kafka looks like now for the subscription: topics (ids, partitions) and offsets."""

    topics: Mapping[str, TopicInfo]
    earliest: Mapping[TP, int]
    latest: Mapping[TP, int]

    def partitions(self) -> list[TP]:
        """Every (topic, partition) of the snapshot's topics, sorted."""
        return [(t, p) for t, info in sorted(self.topics.items()) for p in info.partitions]


@dataclass
class Advance:
    """The outcome of comparing the previous end with a snapshot (before admission control)."""

    start: dict[TP, int] = field(default_factory=dict)    # effective next offset to read
    until: dict[TP, int] = field(default_factory=dict)    # how far data is available
    new_partitions: dict[TP, int] = field(default_factory=dict)
    losses: list[Loss] = field(default_factory=list)


def advance(prev: KafkaSourceOffset, snap: Snapshot,
            target: Mapping[TP, int] | None = None) -> Advance:
    """Compare the previous end offset with Kafka now: find continuing, new and vanished
    partitions and every kind of loss.

    Parameters
    ----------
    prev
        The previous batch's end offset.
    snap
        Kafka now.
    target
        Trigger.AvailableNow's fixed end: caps what is read, and partitions it lacks wait for
        the next run. None for other triggers.

    Returns
    -------
    Advance
        Where each partition's next batch starts, how far it may go, and the losses.

    Runs on
    -------
    driver"""
    out = Advance()
    recreated: set[str] = set()
    for topic, parts in sorted(prev.offsets.items()):
        info = snap.topics.get(topic)
        old_id = prev.topic_ids.get(topic)
        if info is None:
            for p, off in sorted(parts.items()):
                out.losses.append(Loss(topic, p, "topic was deleted (or left the subscription); "
                                       "records after the last read offset may be lost",
                                       off, None))
            continue
        if old_id is not None and info.topic_id != old_id:
            recreated.add(topic)
            for p, off in sorted(parts.items()):
                out.losses.append(Loss(topic, p, f"topic was deleted and recreated (topic id "
                                       f"{old_id} -> {info.topic_id}); unread records of the old "
                                       "topic are lost", off, None))
            continue
        for p, off in sorted(parts.items()):
            tp = (topic, p)
            if p not in info.partitions or tp not in snap.latest:
                out.losses.append(Loss(topic, p, "partition vanished", off, None))
                continue
            latest, earliest = snap.latest[tp], snap.earliest.get(tp, 0)
            start = off
            if latest < off:
                out.losses.append(Loss(topic, p, f"offsets went back: the log now ends at "
                                       f"{latest} but {off} was already reached (log truncated)",
                                       latest, off))
                start = latest
            elif earliest > off:
                out.losses.append(Loss(topic, p, f"retention deleted unread records (log now "
                                       f"starts at {earliest})", off, earliest))
                start = earliest
            out.start[tp] = start
            out.until[tp] = latest
    for topic, info in sorted(snap.topics.items()):
        known = prev.offsets.get(topic, {}) if topic not in recreated else {}
        for p in info.partitions:
            tp = (topic, p)
            if p in known or tp not in snap.latest:
                continue
            if target is not None and tp not in target:
                continue  # found after Trigger.AvailableNow fixed its target: next run reads it
            first = snap.earliest.get(tp, 0)
            if first > 0:
                out.losses.append(Loss(topic, p, f"new partition starts at offset {first}, not "
                                       "0: its first records were deleted before this query "
                                       "saw them", 0, first))
            out.new_partitions[tp] = first
            out.start[tp] = first
            out.until[tp] = max(first, snap.latest[tp])
    if target is not None:
        for tp in out.until:
            if tp in target:
                out.until[tp] = max(out.start[tp], min(out.until[tp], target[tp]))
            else:
                out.until[tp] = out.start[tp]
    return out


def rate_limit(start: Mapping[TP, int], until: Mapping[TP, int], limit: int) -> dict[TP, int]:
    """Spark's split of ``maxOffsetsPerTrigger``: each partition gets a share proportional to its
    backlog; shares below one record round up so small partitions are not starved.

    Parameters
    ----------
    start
        Each partition's next offset.
    until
        How far each partition's data is available.
    limit
        The records the batch may take overall.

    Returns
    -------
    dict
        Each partition's end offset for the batch (``until`` itself when within ``limit``).

    Runs on
    -------
    driver"""
    sizes = {tp: until[tp] - start[tp] for tp in until if until[tp] > start[tp]}
    total = sum(sizes.values())
    if total <= limit:
        return dict(until)
    result = dict(until)
    for tp, size in sizes.items():
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        result[tp] = min(until[tp], start[tp] + share)
    return result


def backlog(start: Mapping[TP, int], until: Mapping[TP, int]) -> int:
    """Records available beyond ``start``.

    Parameters
    ----------
    start
        Each partition's next offset (a partition missing here counts nothing).
    until
        How far each partition's data is available.

    Returns
    -------
    int
        The records in ``[start, until)`` summed over the partitions.

    Runs on
    -------
    driver"""
    return sum(max(0, until[tp] - start.get(tp, until[tp])) for tp in until)


def plan_ranges(start: KafkaSourceOffset, end: KafkaSourceOffset, integrity: Integrity,
                min_partitions: int | None = None,
                max_records: int | None = None) -> list[OffsetRange]:
    """One range per topic-partition with data between ``start`` and ``end``; integrity 'none'
    may split ranges (``maxRecordsPerPartition`` / ``minPartitions``).

    Parameters
    ----------
    start
        The batch's start offset (the previous batch's end).
    end
        The batch's end offset; a partition it lists as new starts at its first offset.
    integrity
        The query's option ``integrity``: ranges are strict under ``"strict"``, split only
        under ``"none"``.
    min_partitions
        Option ``minPartitions`` (``"none"`` only), or None.
    max_records
        Option ``maxRecordsPerPartition`` (``"none"`` only), or None.

    Returns
    -------
    list[OffsetRange]
        The non-empty ranges, in topic and partition order.

    Raises
    ------
    DataLossError
        A partition of ``end`` has no start: the checkpoint's offset log is inconsistent.

    Runs on
    -------
    driver"""
    ranges: list[OffsetRange] = []
    strict = integrity == "strict"
    for topic, parts in sorted(end.offsets.items()):
        same_topic = start.topic_ids.get(topic) == end.topic_ids.get(topic)
        for p, until in sorted(parts.items()):
            known = start.get(topic, p) if same_topic else None
            if known is None:
                first = end.new_partitions.get(topic, {}).get(p)
                if first is None:
                    raise DataLossError(
                        f"orderedkafka: offset for {topic}-{p} has no start: it is neither in "
                        "the previous batch nor listed as a new partition; the checkpoint's "
                        "offset log is inconsistent")
                known = first
            if until > known:
                ranges.append(OffsetRange(topic, p, known, until, strict))
    if integrity != "none" or not ranges:
        return ranges
    return split_ranges(ranges, min_partitions, max_records)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None) -> list[OffsetRange]:
    """Split ranges for throughput (integrity 'none' only): pieces of at most ``max_records``,
    and at least ``min_partitions`` pieces overall, bigger ranges split more.

    Parameters
    ----------
    ranges
        The ranges to split.
    min_partitions
        The fewest pieces overall, or None.
    max_records
        The most records in one piece, or None.

    Returns
    -------
    list[OffsetRange]
        Contiguous non-empty pieces covering each range, in the ranges' order.

    Runs on
    -------
    driver"""
    pieces = {r: 1 for r in ranges}
    if max_records:
        pieces = {r: max(1, math.ceil(r.size / max_records)) for r in ranges}
    if min_partitions and sum(pieces.values()) < min_partitions:
        total = sum(r.size for r in ranges)
        pieces = {r: max(n, math.ceil(r.size / total * min_partitions)) if total else n
                  for r, n in pieces.items()}
    out: list[OffsetRange] = []
    for r, n in pieces.items():
        n = min(n, r.size)
        step = r.size / n
        bounds = [r.start + round(i * step) for i in range(n)] + [r.end]
        out.extend(OffsetRange(r.topic, r.partition, a, b, r.strict)
                   for a, b in zip(bounds, bounds[1:]) if b > a)
    return out
