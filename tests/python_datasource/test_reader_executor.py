"""The executor-side range reader called directly against the real broker (no Spark):
Arrow schema, headers, legitimate gaps, loss detection inside a task."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition
from pyspark.sql.pandas.types import to_arrow_schema

from orderedstream.core.errors import DataLossError
from orderedstream.python_datasource.options import parse_options
from orderedstream.python_datasource.planning import OffsetRange
from orderedstream.python_datasource.reader import RangeReader, read_range
from orderedstream.python_datasource.source import kafka_schema


def opts(bootstrap: str, **extra: Any) -> Any:
    return parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": "x",
                          **{k: str(v) for k, v in extra.items()}}, streaming=True)


def test_arrow_schema_equals_sparks_conversion() -> None:
    from orderedstream.python_datasource.reader import arrow_schema

    for headers in (False, True):
        assert arrow_schema(headers).equals(to_arrow_schema(kafka_schema(headers),
                                                            timezone="UTC"))


def test_batches_are_bounded_and_carry_headers(kafka: Any, topic: Any, reader: str) -> None:
    name = topic(partitions=1)
    kafka.produce(name, [(b"k", b"v")] * 3, headers=[("h1", b"a"), ("h2", b"b")])
    kafka.produce(name, [(None, b"plain")] * 2500)
    o = opts(kafka.bootstrap, reader=reader, includeHeaders="true", arrowBatchMaxRecords=1000)
    batches = list(read_range(OffsetRange(name, 0, 1, 2503), o))
    assert max(b.num_rows for b in batches) <= 1000
    table = pa.Table.from_batches(batches)
    assert table["offset"].to_pylist() == list(range(1, 2503))
    assert table["headers"][0].as_py() == [{"key": "h1", "value": b"a"},
                                           {"key": "h2", "value": b"b"}]
    assert table["headers"][5].as_py() is None and table["key"][5].as_py() is None
    assert set(table["timestampType"].to_pylist()) == {0}  # CreateTime, as Spark numbers it


def transactional_topic(kafka: Any, name: str) -> tuple[list[int], int]:
    """committed 5, aborted 4, committed 3: returns offsets of committed values and the end."""
    producer = kafka.producer(transactional_id=f"tx-{name}")
    producer.init_transactions(30)
    for count, commit in ((5, True), (4, False), (3, True)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(name, value=f"{'c' if commit else 'a'}{i}".encode(), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    end = kafka.end_offsets(name)[0]
    return end


def test_transactions_under_read_committed_pass_strict(kafka: Any, topic: Any,
                                                      reader: str) -> None:
    name = topic(partitions=1)
    end = transactional_topic(kafka, name)
    committed = opts(kafka.bootstrap, reader=reader,
                     **{"kafka.isolation.level": "read_committed"})
    table = pa.Table.from_batches(list(read_range(OffsetRange(name, 0, 0, end), committed)))
    assert [v.decode() for v in table["value"].to_pylist()] == \
        ["c0", "c1", "c2", "c3", "c4", "c0", "c1", "c2"]
    # the range ends on a commit marker: the reader still knows it reached the end
    uncommitted = opts(kafka.bootstrap, reader=reader)
    table = pa.Table.from_batches(list(read_range(OffsetRange(name, 0, 0, end), uncommitted)))
    assert table.num_rows == 12  # aborted records are delivered, as Spark's default does


def test_loss_inside_a_task_strict_and_window(kafka: Any, topic: Any, reader: str) -> None:
    name = topic(partitions=1)
    kafka.produce(name, [(None, str(i).encode()) for i in range(30)])
    kafka.admin().delete_records([TopicPartition(name, 0, 10)])[
        TopicPartition(name, 0, 10)].result(30)
    with pytest.raises(DataLossError, match=rf"{name}-0 offsets \[0, 10\)"):
        list(read_range(OffsetRange(name, 0, 0, 30, strict=True),
                        opts(kafka.bootstrap, reader=reader)))
    window = RangeReader(OffsetRange(name, 0, 0, 30, strict=False),
                         opts(kafka.bootstrap, reader=reader))
    table = pa.Table.from_batches(list(window.batches()))
    assert table["offset"].to_pylist() == list(range(10, 30))


class _SkippingConsumer:
    """A real consumer with one injected fault, the one a chaos run once met: after ``after``
    records it hides the next fetch and reports its position past the range end."""

    def __init__(self, real: Any, after: int, claim: int) -> None:
        self.real, self.after, self.claim, self.delivered = real, after, claim, 0
        self.lied = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def consume(self, want: int, timeout_s: float, end: int, headers: bool) -> Any:
        if self.delivered >= self.after and not self.lied:
            self.real.consume(want, timeout_s, end, headers)  # its records are dropped
            self.lied = True
            return self.real.consume(0, 0.0, end, headers)
        fetch = self.real.consume(want, timeout_s, end, headers)
        self.delivered += fetch.kept
        return fetch

    def position(self) -> int:
        return self.claim if self.lied else int(self.real.position())


def test_an_early_end_claimed_by_position_is_read_again(kafka: Any, topic: Any,
                                                        reader: str, caplog: Any) -> None:
    """A consumer that drops a fetch and reports its position past the range end (as
    librdkafka's did after broker restarts in chaos runs) is not believed on its word: the
    reader assigns it again at the first undelivered offset, reads the rest, and says so."""
    name = topic(partitions=1)
    kafka.produce(name, [(None, str(i).encode()) for i in range(10)])
    rng = OffsetRange(name, 0, 0, 10, strict=True)
    r = RangeReader(rng, opts(kafka.bootstrap, reader=reader, arrowBatchMaxRecords=4))
    real_open = r._open
    faulty: list[_SkippingConsumer] = []

    def open_faulty() -> Any:
        faulty.append(_SkippingConsumer(real_open(), after=8, claim=10))
        return faulty[-1]

    r._open = open_faulty  # type: ignore[method-assign]
    with caplog.at_level("DEBUG", logger="orderedstream.python_datasource.reader"):
        table = pa.Table.from_batches(list(r.batches()))
    assert faulty[0].lied
    assert table["offset"].to_pylist() == list(range(10))
    assert "position claims no record in [8, 10)" in caplog.text
    assert "(position), but a fresh read delivers offset 8" in caplog.text


def test_a_record_behind_a_queued_end_of_log_event_is_read(kafka: Any, topic: Any, reader: str,
                                                           caplog: Any) -> None:
    """The chaos runs' lost record, made deterministic: a pooled consumer that read to the
    log end keeps librdkafka's end-of-log event queued; the next record is produced and the
    next range [5, 6) gets that event first. librdkafka's batch consume then reports the
    position one past the event's offset (6), as if record 5 had been delivered: the range
    must still deliver record 5, without a re-read."""
    name = topic(partitions=1)
    kafka.produce(name, [(None, str(i).encode()) for i in range(5)])
    o = opts(kafka.bootstrap, reader=reader)
    first = pa.Table.from_batches(list(read_range(OffsetRange(name, 0, 0, 5, strict=True), o)))
    assert first["offset"].to_pylist() == list(range(5))
    time.sleep(1.5)  # the pooled consumer reaches the log end: its end-of-log event is queued
    kafka.produce(name, [(None, b"5")])
    with caplog.at_level("DEBUG", logger="orderedstream.python_datasource.reader"):
        second = list(read_range(OffsetRange(name, 0, 5, 6, strict=True), o))
    assert pa.Table.from_batches(second)["offset"].to_pylist() == [5]
    assert "claims no record" not in caplog.text
