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
