"""The data generator writes real capture sessions; the verifier's reference model reads them
back."""

from __future__ import annotations

from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.app.job.verify import compare, expected_from_topics, read_topics
from tests.fixtures import unique


def test_generated_sessions_read_back_in_order_with_dead_letters(kafka) -> None:
    opts = GeneratorOptions(prefix=unique("gen"), sites=2, late_sites=1, partitions=2,
                            sessions_per_site=6, rows=5, updates=12, bad_fraction=0.05, seed=3)
    stats = generate(kafka.bootstrap, opts, create_topic=kafka.create_topic)
    assert stats.topics == [opts.topic(s) for s in opts.site_names()]
    records = list(read_topics(kafka.bootstrap, f"{opts.prefix}-.*"))
    assert len(records) == stats.records
    changes, dead, final = expected_from_topics(records)
    assert len(dead) == stats.bad_records > 0
    assert len(changes) + len(dead) == stats.records
    # Every session's messages come back in seq order within its partition.
    last_seq: dict[str, int] = {}
    for coords in sorted(changes):
        session, seq = changes[coords]
        assert seq == last_seq.get(session, -1) + 1, (coords, session, seq)
        last_seq[session] = seq
    assert final, "some sessions end"

    # The verifier counts what a faulty job would do wrong.
    rows = [{"topic": t, "partition": p, "offset": o, "session": s, "seq": q, "applied_seq": q}
            for (t, p, o), (s, q) in changes.items()]
    dead_rows = [{"topic": t, "partition": p, "offset": o} for (t, p, o) in dead]
    assert compare(changes, dead, final, rows, dead_rows).ok
    broken = rows[1:] + rows[:1]  # nothing lost yet
    broken[0] = {**broken[0], "applied_seq": broken[0]["seq"] + 1}
    verdict = compare(changes, dead, final, broken[:-1] + [broken[2]], dead_rows[1:])
    assert (verdict.lost, verdict.duplicated, verdict.out_of_order,
            verdict.dead_letters_missing) == (1, 1, 1, 1)


def _transactions(kafka, topic: str) -> list[int]:
    """Committed, aborted, committed transactions into ``topic``: the log ends with a commit
    marker and holds aborted records; returns the committed records' values as ints."""
    producer = kafka.producer(transactional_id=unique("verify-tx"))
    producer.init_transactions()
    committed: list[int] = []
    for n, commit in ((4, True), (3, False), (2, True)):
        producer.begin_transaction()
        for i in range(n):
            value = len(committed) * 100 + i + (0 if commit else 50)
            producer.produce(topic, key=b"k", value=str(value).encode())
            if commit:
                committed.append(value)
        producer.flush(30)  # the aborted records are in the log, not just purged
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    return committed


def test_read_topics_stops_at_each_partitions_end(kafka) -> None:
    """Every committed record, partition by partition, and no more: an empty partition,
    one ending in transaction markers, and ``until`` limits. (How long the read takes is
    not asserted here: speed belongs in the benchmarks.)"""
    prefix = unique("verify")
    plain, tx = f"{prefix}-plain", f"{prefix}-tx"
    kafka.create_topic(plain, 4)  # partition 3 stays empty
    kafka.create_topic(tx, 1)
    for partition, count in ((0, 5), (1, 2500), (2, 1)):  # 2500: more than one consume()
        kafka.produce(plain, [(b"k", str(i).encode()) for i in range(count)], partition=partition)
    committed = _transactions(kafka, tx)
    lines: list[str] = []

    records = list(read_topics(kafka.bootstrap, f"{prefix}-.*", progress=lines.append,
                               progress_every=0.0))
    by_partition: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset, _key, value in records:
        assert value is not None
        by_partition.setdefault((topic, partition), []).append(int(value))
        assert offset >= 0
    assert by_partition == {(plain, 0): list(range(5)), (plain, 1): list(range(2500)),
                            (plain, 2): [0], (tx, 0): committed}
    offsets = [o for t, _p, o, _k, _v in records if t == tx]
    assert offsets == sorted(offsets) and len(offsets) == len(committed)
    assert lines and lines[-1].startswith("[verify]") and "records read" in lines[-1]

    # ``until`` stops each partition where it says, markers or not
    until = {(plain, 1): 10, (tx, 0): offsets[1] + 1}
    cut = list(read_topics(kafka.bootstrap, f"{prefix}-.*", until=until))
    assert [int(v) for t, p, _o, _k, v in cut if (t, p) == (plain, 1)] == list(range(10))
    assert [int(v) for t, _p, _o, _k, v in cut if t == tx] == committed[:2]
