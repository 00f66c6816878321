"""The steady-rate case's input and figures: a fixed-rate feeder, Kafka lag, per-record latency.

The feeder runs in a process of its own (``python -m benchmarks.cases._steady_feed SPEC``),
outside every engine's process tree, so its CPU is counted in no engine. It is the job's own
generator (``orderedstream.app.job.generator``) paced at a fixed rate. Latency is computed
the same way for every engine, from each record's Kafka timestamp and the list of commits
that made records visible (a commit: when, and each partition's end offset).
Not a case itself (the leading underscore keeps it out of ``benchmarks.run``'s list).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

TOPICS, PARTITIONS = 4, 3
"""Four topics of three partitions: the twelve Kafka partitions of the small-batch case."""
RECORDS_PER_SESSION = 52  # GeneratorOptions defaults: a snapshot, 50 changes, (an end)

Commit = tuple[float, dict[tuple[str, int], int]]
"""(epoch seconds, (topic, partition) -> end offset) of one commit that made records visible."""


def topic_names(prefix: str) -> list[str]:
    """The steady case's topics for ``prefix`` (as the generator names its sites' topics)."""
    return [f"{prefix}-site{i:02d}" for i in range(TOPICS)]


def create_topics(bootstrap: str, prefix: str) -> list[str]:
    """Create the ``prefix`` topics (``PARTITIONS`` each) before any engine subscribes."""
    from confluent_kafka.admin import AdminClient, NewTopic

    names = topic_names(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result(30)
    return names


def start_feeder(bootstrap: str, prefix: str, rate: float | None, seconds: float, seed: int,
                 log: Path) -> subprocess.Popen[bytes]:
    """Start the feeder process: ``rate`` records/s (None: as fast as it can) for about
    ``seconds`` seconds into the ``prefix`` topics; its last output line is its JSON stats."""
    spec = json.dumps({"bootstrap": bootstrap, "prefix": prefix, "rate": rate,
                       "seconds": seconds, "seed": seed})
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "benchmarks.cases._steady_feed", spec],
                                stdout=subprocess.PIPE, stderr=out,
                                cwd=Path(__file__).resolve().parents[2])


def feeder_stats(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """Wait for a feeder started by ``start_feeder``; its stats (records, seconds, rate)."""
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the feeder failed (exit {proc.returncode})")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def feed(bootstrap: str, prefix: str, rate: float | None, seconds: float, seed: int
         ) -> dict[str, Any]:
    """Produce capture sessions into the ``prefix`` topics, paced at ``rate`` records/s.

    Parameters
    ----------
    bootstrap
        Kafka's bootstrap servers.
    prefix
        Topic prefix (the topics exist already: ``create_topics``).
    rate
        Records per second (None: as fast as the generator goes).
    seconds
        How long to produce: ``rate * seconds`` records in all (``seconds`` records a second
        of the unpaced generator's nominal 10,000 when ``rate`` is None).
    seed
        The generator's seed; also names the sessions so that two feeds never share one.

    Returns
    -------
    dict
        ``records``, ``seconds`` and the achieved ``rate``.
    """
    from orderedstream.app.job.generator import GeneratorOptions, generate

    wanted = (rate or 10_000) * seconds
    sessions = max(1, math.ceil(wanted / (TOPICS * RECORDS_PER_SESSION)))
    opts = GeneratorOptions(prefix=prefix, sites=TOPICS, late_sites=0, partitions=PARTITIONS,
                            sessions_per_site=sessions, seed=seed, session_tag=f"f{seed}",
                            rate=rate)
    stats = generate(bootstrap, opts)
    return {"records": stats.records, "seconds": stats.seconds,
            "rate": stats.records / stats.seconds if stats.seconds else 0.0}


class KafkaEnds:
    """Each partition's high watermark of a set of topics, with one long-lived consumer."""

    def __init__(self, bootstrap: str, topics: Iterable[str]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.bootstrap = bootstrap
        self.partitions = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        self._consumer = Consumer({"bootstrap.servers": bootstrap,
                                   "group.id": "orderedstream-steady-lag",
                                   "enable.auto.commit": False})

    def ends(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> high watermark now."""
        return {(tp.topic, tp.partition):
                self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                for tp in self.partitions}

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> next offset consumer group ``group`` committed."""
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        try:
            found = consumer.committed(self.partitions, timeout=10)
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): max(0, tp.offset) for tp in found}

    def close(self) -> None:
        self._consumer.close()


def record_timestamps(bootstrap: str, topics: Iterable[str]
                      ) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """(topic, partition) -> (offsets, Kafka timestamps in epoch seconds) of every record."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "orderedstream-steady-ts",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    out: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    try:
        for topic in topics:
            for partition in range(PARTITIONS):
                tp = TopicPartition(topic, partition)
                low, high = consumer.get_watermark_offsets(tp, timeout=10)
                offsets: list[int] = []
                stamps: list[float] = []
                consumer.assign([TopicPartition(topic, partition, low)])
                position = low
                while position < high:
                    for msg in consumer.consume(2000, 0.5):
                        err, offset = msg.error(), int(msg.offset() or 0)
                        if err is not None:
                            if err.code() == KafkaError._PARTITION_EOF:
                                position = max(position, offset)
                            continue
                        offsets.append(offset)
                        stamps.append(msg.timestamp()[1] / 1000.0)
                        position = offset + 1
                    position = max(position, consumer.position([tp])[0].offset)
                consumer.unassign()
                out[(topic, partition)] = (np.asarray(offsets, dtype=np.int64),
                                           np.asarray(stamps, dtype=np.float64))
    finally:
        consumer.close()
    return out


def latencies(commits: list[Commit],
              stamps: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]],
              since: float, until: float) -> tuple[np.ndarray, int]:
    """Per-record latency, seconds from the record's Kafka timestamp to the first commit
    whose end offset for its partition passes the record, for records stamped in
    ``[since, until]``; also how many of those no commit covered.

    Parameters
    ----------
    commits
        The engine's commits, in any order (sorted by time here).
    stamps
        ``record_timestamps``'s offsets and timestamps.
    since
        First Kafka timestamp counted (epoch seconds).
    until
        Last Kafka timestamp counted.

    Returns
    -------
    tuple
        (latencies in seconds, records not committed).
    """
    ordered = sorted(commits, key=lambda c: c[0])
    found: list[np.ndarray] = []
    missing = 0
    for tp, (offsets, times) in stamps.items():
        mask = (times >= since) & (times <= until)
        if not mask.any():
            continue
        when = np.asarray([t for t, ends in ordered if tp in ends], dtype=np.float64)
        ends = np.maximum.accumulate(np.asarray([e[tp] for _, e in ordered if tp in e],
                                                dtype=np.int64)) if len(when) else np.zeros(0)
        at = np.searchsorted(ends, offsets[mask], side="right")
        covered = at < len(ends)
        missing += int((~covered).sum())
        found.append(when[at[covered]] - times[mask][covered])
    return (np.concatenate(found) if found else np.zeros(0)), missing


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    print(json.dumps(feed(args["bootstrap"], args["prefix"], args["rate"], args["seconds"],
                          args["seed"])), flush=True)
