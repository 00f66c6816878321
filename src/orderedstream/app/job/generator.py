"""Writes capture sessions to ``<prefix>-<site>`` topics, keyed by session id.

Each session sends a snapshot of ``rows`` rows, then ``updates`` row changes (insert / update /
delete), then (usually) an end marker; sessions of a site interleave, each in its own order.
A fraction of records is bad on purpose (not UTF-8, not JSON, unknown type, changes for a
session that never sent a snapshot) so the dead-letter path is exercised. Deterministic for a
seed; memory is bounded by the number of open sessions, not by the volume produced.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orderedstream.app.job.messages import encode


@dataclass(frozen=True, kw_only=True)
class GeneratorOptions:
    """What to generate. ``late_sites`` topics appear only after half the records are sent.

    ``session_tag`` keeps session ids of several runs (waves) into the same topics apart;
    ``rate`` paces production (records per second; None: as fast as possible).
    """

    prefix: str = "sessions"
    sites: int = 3
    late_sites: int = 1
    partitions: int = 3
    sessions_per_site: int = 20
    rows: int = 20
    updates: int = 50
    open_sessions: int = 8
    end_fraction: float = 0.8
    bad_fraction: float = 0.01
    seed: int = 7
    session_tag: str = ""
    rate: float | None = None

    def site_names(self) -> list[str]:
        """Every site's name, the late ones last: ``site00``, ``site01``, ..."""
        return [f"site{i:02d}" for i in range(self.sites + self.late_sites)]

    def topic(self, site: str) -> str:
        """The Kafka topic of ``site``: ``<prefix>-<site>``.

        Parameters
        ----------
        site
            A name from ``site_names``."""
        return f"{self.prefix}-{site}"


@dataclass
class GeneratorStats:
    """What was sent, for the summary and the tests."""

    records: int = 0
    sessions: int = 0
    bad_records: int = 0
    topics: list[str] = field(default_factory=list)
    seconds: float = 0.0


class _Session:
    def __init__(self, site: str, index: int, opts: GeneratorOptions, rng: random.Random) -> None:
        self.site = site
        self.id = f"{site}-{opts.session_tag}s{index:05d}"
        self.seq = 0
        self.rows: list[str] = []
        self.next_row = 0
        self.remaining = opts.updates
        self.ends = rng.random() < opts.end_fraction
        self.opts = opts

    def next_message(self, rng: random.Random) -> dict[str, Any] | None:
        base = {"session": self.id, "site": self.site, "seq": self.seq,
                "ts": int(time.time() * 1000)}
        if self.seq == 0:
            rows = {}
            for _ in range(self.opts.rows):
                rows[self._new_row()] = {"v": rng.randint(0, 1_000_000)}
            self.rows = list(rows)
            message = {**base, "type": "snapshot", "rows": rows}
        elif self.remaining > 0:
            self.remaining -= 1
            op = rng.choice(("insert", "update", "update", "delete")) if self.rows else "insert"
            if op == "insert":
                row = self._new_row()
                self.rows.append(row)
            else:
                row = rng.choice(self.rows)
                if op == "delete":
                    self.rows.remove(row)
            message = {**base, "type": op, "row": row}
            if op != "delete":
                message["values"] = {"v": rng.randint(0, 1_000_000)}
        elif self.ends:
            self.ends = False
            message = {**base, "type": "end"}
        else:
            return None
        self.seq += 1
        return message

    def _new_row(self) -> str:
        self.next_row += 1
        return f"r{self.next_row - 1}"


def _bad_record(rng: random.Random, site: str, n: int) -> tuple[bytes, bytes]:
    kind = rng.randrange(4)
    key = f"{site}-bad{n}-{rng.randrange(1 << 30)}".encode()
    if kind == 0:
        return key, b"\xff\xfe not utf-8 \xc3\x28"
    if kind == 1:
        return key, b'{"type": "update", "session": '
    if kind == 2:
        return key, encode({"type": "teleport", "session": key.decode(), "site": site,
                            "seq": 0, "ts": 0})
    # a change for a session that never sent a snapshot
    return key, encode({"type": "update", "session": key.decode(), "site": site, "seq": 0,
                        "ts": 0, "row": "r0", "values": {"v": 1}})


def generate(bootstrap: str, opts: GeneratorOptions,
             create_topic: Callable[[str, int], None] | None = None,
             progress: Callable[[str], None] | None = None) -> GeneratorStats:
    """Produce all sessions of all sites; create each site's topic just before its first record.

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers.
    opts
        What to generate.
    create_topic
        ``create_topic(name, partitions)``; None: the topics exist (or the broker creates
        them).
    progress
        Gets a line every 50,000 records; None: nothing.

    Returns
    -------
    GeneratorStats
        What was sent.

    Raises
    ------
    RuntimeError
        Records were not delivered (after a flush bounded at two minutes), or Kafka reported
        delivery errors.

    Runs on
    -------
    driver (a thread beside the job, in the demo)"""
    from confluent_kafka import Producer

    rng = random.Random(opts.seed)
    stats = GeneratorStats()
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "compression.type": "lz4"})
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    def send(topic: str, key: bytes, value: bytes) -> None:
        if opts.rate:
            ahead = stats.records / opts.rate - (time.monotonic() - started)
            if ahead > 0:
                producer.poll(0)
                time.sleep(ahead)
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        stats.records += 1

    sites = opts.site_names()
    early, late = sites[: opts.sites], sites[opts.sites:]
    total_expected = (opts.sites + opts.late_sites) * opts.sessions_per_site * (opts.updates + 2)
    active_sites = list(early)
    for site in early:
        _create(create_topic, opts, site, stats)
    queues = {site: iter(range(opts.sessions_per_site)) for site in sites}
    open_sessions: dict[str, list[_Session]] = {site: [] for site in sites}
    bad_n = 0
    while active_sites:
        if late and stats.records >= total_expected // 2:
            for site in late:
                _create(create_topic, opts, site, stats)
                active_sites.append(site)
            late = []
        site = rng.choice(active_sites)
        sessions = open_sessions[site]
        while len(sessions) < opts.open_sessions:
            index = next(queues[site], None)
            if index is None:
                break
            sessions.append(_Session(site, index, opts, rng))
            stats.sessions += 1
        if not sessions:
            active_sites.remove(site)
            continue
        if rng.random() < opts.bad_fraction:
            key, value = _bad_record(rng, site, bad_n)
            bad_n += 1
            stats.bad_records += 1
            send(opts.topic(site), key, value)
            continue
        session = rng.choice(sessions)
        message = session.next_message(rng)
        if message is None:
            sessions.remove(session)
            continue
        send(opts.topic(site), session.id.encode(), encode(message))
        if progress and stats.records % 50000 == 0:
            progress(f"generated {stats.records} records")
    remaining = producer.flush(120)
    if remaining or failures:
        raise RuntimeError(f"generator: {remaining} records undelivered, errors: {failures[:3]}")
    stats.seconds = time.monotonic() - started
    return stats


def _create(create_topic: Callable[[str, int], None] | None, opts: GeneratorOptions, site: str,
            stats: GeneratorStats) -> None:
    topic = opts.topic(site)
    if create_topic is not None:
        create_topic(topic, opts.partitions)
    stats.topics.append(topic)
