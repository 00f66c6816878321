"""Checks the job's output against the Kafka topics alone: lost, duplicated, out of order.

The expected change log is recomputed by reading every topic-partition in offset order and
applying a plain reference model of capture sessions (a dict per session), independent of the
job's code path. The job's ``changes`` table carries, per row, the record's Kafka coordinates,
the producer's ``seq`` and the job's own ``applied_seq`` (how many messages of that session the
job had applied before it): a row whose two counters differ was applied out of order.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from orderedstream.app.job.messages import BadMessage, parse

Record = tuple[str, int, int, bytes | None, bytes | None]
"""(topic, partition, offset, key, value) of one Kafka record."""


@dataclass
class Verification:
    """The verdict; every count except ``checked`` must be zero."""

    checked: int = 0
    expected_changes: int = 0
    expected_dead_letters: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    dead_letters_missing: int = 0
    dead_letters_duplicated: int = 0
    wrong_final_tables: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing was lost, duplicated, out of order or wrong."""
        return not (self.lost or self.duplicated or self.out_of_order or self.dead_letters_missing
                    or self.dead_letters_duplicated or self.wrong_final_tables)

    def as_dict(self) -> dict[str, Any]:
        """The counts and examples as a JSON-ready dict, with ``ok``."""
        return {**asdict(self), "ok": self.ok}


def read_topics(bootstrap: str, pattern: str, until: dict[tuple[str, int], int] | None = None,
                *, progress: Callable[[str], None] | None = None,
                progress_every: float = 10.0) -> Iterator[Record]:
    """Yield (topic, partition, offset, key, value) for every record of topics matching
    ``pattern``, partition by partition in offset order, up to ``until`` (default: each
    partition's end offset now). Committed records only (``read_committed``).

    A partition is done as soon as the consumer's position reaches its end offset (the last
    offsets may be transaction markers, never delivered as records), not after a timeout.

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers.
    pattern
        The topics' regular expression.
    until
        ``(topic, partition) -> end offset``; None: each partition's end offset now.
    progress
        Gets a line every ``progress_every`` seconds while it reads; None: nothing.
    progress_every
        Seconds between progress lines.

    Yields
    ------
    tuple
        ``(topic, partition, offset, key, value)`` of each record.

    Runs on
    -------
    driver"""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "orderedstream-verify",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    meter = _Progress(progress, progress_every)
    try:
        topics = sorted(t for t in consumer.list_topics(timeout=10).topics
                        if re.fullmatch(pattern, t))
        for topic in topics:
            md = consumer.list_topics(topic, timeout=10).topics[topic]
            for partition in sorted(md.partitions):
                yield from _read_partition(consumer, topic, partition, until, meter)
    finally:
        consumer.close()


def _read_partition(consumer: Any, topic: str, partition: int,
                    until: dict[tuple[str, int], int] | None, meter: _Progress,
                    ) -> Iterator[Record]:
    """One partition's records from its first offset up to its end offset (exclusive)."""
    from confluent_kafka import KafkaError, TopicPartition

    tp = TopicPartition(topic, partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=10)
    end = until.get((topic, partition), high) if until else high
    if end <= low:
        return
    consumer.assign([TopicPartition(topic, partition, low)])
    position = low
    while position < end:
        # consume() returns early only once it has num_messages (records and the end-of-
        # partition event count), else it waits out its timeout: ask for what remains.
        for msg in consumer.consume(min(2000, end - position), 0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    position = max(position, msg.offset())
                continue
            if msg.offset() >= end:
                position = end
                break
            position = msg.offset() + 1
            meter.records += 1
            yield topic, partition, msg.offset(), msg.key(), msg.value()
        # the position moves past transaction markers that no record follows
        position = max(position, consumer.position([tp])[0].offset)
        meter.report(topic, partition, position, end)
    consumer.unassign()


class _Progress:
    """Counts the records read; a line every ``every`` seconds (none if reading is quick)."""

    def __init__(self, out: Callable[[str], None] | None, every: float) -> None:
        self.out, self.every = out, every
        self.records = 0
        self._began = self._last = time.monotonic()

    def report(self, topic: str, partition: int, position: int, end: int) -> None:
        now = time.monotonic()
        if self.out is not None and now - self._last >= self.every:
            self._last = now
            self.out(f"[verify] {now - self._began:.0f}s: {self.records:,} records read; "
                     f"{topic}[{partition}] at offset {position:,} of {end:,}")


def expected_from_topics(records) -> tuple[dict[tuple[str, int, int], tuple[str, int]],
                                           dict[tuple[str, int, int], str],
                                           dict[str, dict[str, Any]]]:
    """The reference model: what the job must output for ``records``.

    Parameters
    ----------
    records
        ``(topic, partition, offset, key, value)`` per record, each partition in offset
        order (``read_topics``).

    Returns
    -------
    tuple
        ``(topic, partition, offset) -> (session, seq)`` of the applied changes, the dead
        letters' coordinates -> reason code, and each ended session's final table."""
    changes: dict[tuple[str, int, int], tuple[str, int]] = {}
    dead: dict[tuple[str, int, int], str] = {}
    tables: dict[str, dict[str, Any]] = {}
    final: dict[str, dict[str, Any]] = {}
    for topic, partition, offset, key, value in records:
        coords = (topic, partition, offset)
        try:
            msg = parse(key, value)
        except BadMessage as exc:
            dead[coords] = exc.reason
            continue
        if msg.type == "snapshot":
            tables[msg.session] = dict(msg.rows or {})
        elif msg.session not in tables:
            dead[coords] = "no_snapshot"
            continue
        elif msg.type == "insert" or msg.type == "update":
            tables[msg.session][msg.row] = msg.values
        elif msg.type == "delete":
            tables[msg.session].pop(msg.row, None)
        elif msg.type == "end":
            final[msg.session] = tables.pop(msg.session)
        changes[coords] = (msg.session, msg.seq)
    return changes, dead, final


def compare(expected_changes: dict[tuple[str, int, int], tuple[str, int]],
            expected_dead: dict[tuple[str, int, int], str],
            expected_final: dict[str, dict[str, Any]],
            changes_rows: list[dict[str, Any]], dead_rows: list[dict[str, Any]],
            final_rows: list[dict[str, Any]] | None = None) -> Verification:
    """Compare the job's output rows (as dicts) with the reference model.

    Parameters
    ----------
    expected_changes, expected_dead, expected_final
        The reference model (``expected_from_topics``).
    changes_rows
        The output's change rows (``topic``, ``partition``, ``offset``, ``seq``,
        ``applied_seq``, ``session``).
    dead_rows
        The output's dead-letter rows.
    final_rows
        The output's final-table rows (``session``, ``row``, ``values``); None: not
        compared.

    Returns
    -------
    Verification
        The counts, with up to ten examples."""
    result = Verification(expected_changes=len(expected_changes),
                          expected_dead_letters=len(expected_dead))
    seen = Counter((r["topic"], r["partition"], r["offset"]) for r in changes_rows)
    result.checked = sum(seen.values())
    for coords in expected_changes:
        if coords not in seen:
            result.lost += 1
            if len(result.examples) < 10:
                result.examples.append(f"lost change at {coords}")
    for coords, count in seen.items():
        if count > 1:
            result.duplicated += count - 1
            if len(result.examples) < 10:
                result.examples.append(f"{count} copies of change at {coords}")
        if coords not in expected_changes:
            result.duplicated += 1
            if len(result.examples) < 10:
                result.examples.append(f"unexpected change at {coords}")
    for row in changes_rows:
        if row["applied_seq"] != row["seq"]:
            result.out_of_order += 1
            if len(result.examples) < 10:
                result.examples.append(f"session {row['session']} seq {row['seq']} applied as "
                                       f"{row['applied_seq']}")
    dead_seen = Counter((r["topic"], r["partition"], r["offset"]) for r in dead_rows)
    result.dead_letters_missing = sum(1 for c in expected_dead if c not in dead_seen)
    result.dead_letters_duplicated = sum(n - 1 for n in dead_seen.values() if n > 1)
    if final_rows is not None:
        actual: dict[str, dict[str, Any]] = {}
        for row in final_rows:
            actual.setdefault(row["session"], {})[row["row"]] = row["values"]
        for session, table in expected_final.items():
            if actual.get(session, {}) != table:
                result.wrong_final_tables += 1
                if len(result.examples) < 10:
                    result.examples.append(f"final table of {session} differs")
    return result
