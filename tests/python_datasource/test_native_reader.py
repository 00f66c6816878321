"""The native Kafka reader (orderedstream._kafka_native) against the real broker: the same Arrow
batches as the confluent-kafka reader, option ``reader``, and the worker's consumer pool
(consumers reused across consecutive ranges, re-positioned when a range starts elsewhere,
bounded, closed when idle)."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from orderedstream.core.errors import DataLossError, OptionError
from orderedstream.python_datasource.consumer_pool import POOL, ConsumerPool
from orderedstream.python_datasource.consumers import native_unavailable_reason, resolve
from orderedstream.python_datasource.options import parse_options
from orderedstream.python_datasource.planning import OffsetRange
from orderedstream.python_datasource.reader import read_range


def opts(bootstrap: str, **extra: Any) -> Any:
    return parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": "x",
                          **{k: str(v) for k, v in extra.items()}}, streaming=True)


def test_the_extension_is_built() -> None:
    """Fails (never skips) when scripts/bootstrap.sh could not build the extension."""
    assert native_unavailable_reason() is None, native_unavailable_reason()
    assert resolve("auto") == "native" and resolve("python") == "python"


def test_reader_option_is_validated_at_load() -> None:
    with pytest.raises(OptionError, match="option 'reader' = 'rust' is invalid: accepted 'auto'"):
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "reader": "rust"},
                      streaming=None)
    with pytest.raises(OptionError, match="'kafkaConsumer.cacheCapacity'"):
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                       "kafkaConsumer.cacheCapacity": "-1"}, streaming=None)
    o = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=None)
    assert (o.reader, o.consumer_cache_capacity, o.consumer_cache_timeout_ms) == \
        ("auto", 16, 300_000)


def test_native_and_python_readers_give_equal_batches(kafka: Any, topic: Any) -> None:
    """Null and empty keys/values, many headers (null values, non-ASCII names), and chunking:
    column for column the same Arrow data, schema included."""
    name = topic(partitions=1)
    kafka.produce(name, [(None, None), (b"", b""), (b"k", b"v" * 5000)],
                  headers=[("h\u00e9", None), ("b", b""), ("c", b"\x00\x01")])
    kafka.produce(name, [(b"k%d" % i, None if i % 7 == 0 else b"%d" % i) for i in range(3000)])
    kafka.produce(name, [(None, b"plain")], headers=[("only", b"1")])
    end = kafka.end_offsets(name)[0]
    tables = {}
    for kind in ("native", "python"):
        o = opts(kafka.bootstrap, reader=kind, includeHeaders="true", arrowBatchMaxRecords=700,
                 **{"kafkaConsumer.cacheCapacity": 0})
        batches = list(read_range(OffsetRange(name, 0, 0, end), o))
        assert max(b.num_rows for b in batches) <= 700
        tables[kind] = pa.Table.from_batches(batches).combine_chunks()
        for column in tables[kind].columns:
            column.validate(full=True)
    native, python = tables["native"], tables["python"]
    assert native.schema.equals(python.schema)
    assert native.num_rows == end
    for field in native.schema.names:
        assert native[field].equals(python[field]), field
    assert native["key"][0].as_py() is None and native["value"][0].as_py() is None
    assert native["key"][1].as_py() == b"" and native["value"][2].as_py() == b"v" * 5000
    assert native["headers"][1].as_py() == [{"key": "h\u00e9", "value": None},
                                            {"key": "b", "value": b""},
                                            {"key": "c", "value": b"\x00\x01"}]
    assert native["headers"][3].as_py() is None and native["value"][3].as_py() is None


def _read_all(rng: OffsetRange, options: Any) -> list[int]:
    return [o for b in read_range(rng, options) for o in b["offset"].to_pylist()]


def test_consumers_are_reused_across_consecutive_ranges(kafka: Any, topic: Any,
                                                        reader: str) -> None:
    name = topic(partitions=2)
    for p in range(2):
        kafka.produce(name, [(None, b"%d" % i) for i in range(300)], partition=p)
    o = opts(kafka.bootstrap, reader=reader)
    POOL.clear()
    start = POOL.stats.created, POOL.stats.reused, POOL.stats.replaced
    for lo in range(0, 300, 100):  # three batches of two partitions
        for p in range(2):
            assert _read_all(OffsetRange(name, p, lo, lo + 100), o) == list(range(lo, lo + 100))
    created, reused, replaced = (a - b for a, b in zip(
        (POOL.stats.created, POOL.stats.reused, POOL.stats.replaced), start))
    assert (created, reused, replaced) == (2, 4, 0)
    # a replayed batch starts before where the pooled consumer stopped: the idle (unassigned)
    # consumer is assigned there, no new one is made
    closed, moved = POOL.stats.closed, POOL.stats.moved
    assert _read_all(OffsetRange(name, 0, 50, 60), o) == list(range(50, 60))
    assert POOL.stats.moved == moved + 1 and POOL.stats.reused - reused - start[1] == 1
    assert POOL.stats.created - created - start[0] == 0 and POOL.stats.closed == closed
    assert POOL.stats.replaced - replaced - start[2] == 0
    assert _read_all(OffsetRange(name, 0, 60, 70), o) == list(range(60, 70))
    assert POOL.stats.reused - reused - start[1] == 2 and POOL.stats.moved == moved + 1
    # other settings (here the isolation level) never share a consumer
    committed = opts(kafka.bootstrap, reader=reader,
                     **{"kafka.isolation.level": "read_committed"})
    before = POOL.stats.created
    assert _read_all(OffsetRange(name, 0, 60, 70), committed) == list(range(60, 70))
    assert POOL.stats.created == before + 1
    POOL.clear()


def test_an_idle_pooled_consumer_fetches_nothing_and_resumes_at_the_next_range(
        kafka: Any, topic: Any, reader: str) -> None:
    """An idle consumer near the log end is unassigned: librdkafka fetches only assigned
    partitions, so it does not keep a fetch waiting at the broker every fetch.wait.max.ms
    (about 40% of a core of the broker in the small-batch benchmark). Reused, it is assigned
    at the range's start and delivers records produced while it was idle."""
    name = topic(partitions=1)
    kafka.produce(name, [(None, b"%d" % i) for i in range(10)])
    o = opts(kafka.bootstrap, reader=reader)
    POOL.clear()
    assert _read_all(OffsetRange(name, 0, 0, 10), o) == list(range(10))
    with POOL._lock:
        (idle,) = POOL._idle.values()
    assert idle.next_offset == 10 and not idle.assigned and not idle.consumer.assigned()
    kafka.produce(name, [(None, b"%d" % i) for i in range(10, 25)])
    reused = POOL.stats.reused
    assert _read_all(OffsetRange(name, 0, 10, 25), o) == list(range(10, 25))
    assert POOL.stats.reused == reused + 1
    POOL.clear()


def test_a_pooled_consumer_with_a_backlog_after_its_range_keeps_prefetching(
        kafka: Any, topic: Any, reader: str) -> None:
    """Catching up (more than REFETCH_RECORDS records after the range), a released consumer
    stays assigned: the next range's records are prefetched already. A range starting
    elsewhere gets a new consumer (a seek would wait for the outstanding fetch)."""
    from orderedstream.python_datasource.consumer_pool import REFETCH_RECORDS

    name = topic(partitions=1)
    total = REFETCH_RECORDS + 2_000
    kafka.produce(name, [(None, b"%d" % (i % 10)) for i in range(total)])
    o = opts(kafka.bootstrap, reader=reader)
    POOL.clear()
    assert _read_all(OffsetRange(name, 0, 0, 100), o) == list(range(100))
    with POOL._lock:
        (idle,) = POOL._idle.values()
    assert idle.assigned and idle.consumer.assigned() and idle.consumer.position() == 100
    reused, created, replaced = POOL.stats.reused, POOL.stats.created, POOL.stats.replaced
    assert _read_all(OffsetRange(name, 0, 100, 200), o) == list(range(100, 200))
    assert (POOL.stats.reused, POOL.stats.created) == (reused + 1, created)
    assert _read_all(OffsetRange(name, 0, 50, 60), o) == list(range(50, 60))
    assert (POOL.stats.replaced, POOL.stats.created) == (replaced + 1, created + 1)
    # the last REFETCH_RECORDS records: released near the log end, it is unassigned
    end = total - 10
    assert len(_read_all(OffsetRange(name, 0, 60, end), o)) == end - 60
    with POOL._lock:
        (idle,) = POOL._idle.values()
    assert not idle.assigned and not idle.consumer.assigned()
    POOL.clear()


def test_a_failed_read_closes_its_consumer(kafka: Any, topic: Any, reader: str) -> None:
    from confluent_kafka import TopicPartition

    name = topic(partitions=1)
    kafka.produce(name, [(None, b"%d" % i) for i in range(30)])
    o = opts(kafka.bootstrap, reader=reader)
    POOL.clear()
    assert _read_all(OffsetRange(name, 0, 0, 5), o) == list(range(5))
    kafka.admin().delete_records([TopicPartition(name, 0, 20)])[
        TopicPartition(name, 0, 20)].result(30)
    closed = POOL.stats.closed
    # [10, 30) does not continue where the pooled consumer stopped (5): it is assigned at 10,
    # which the log no longer holds (an idle consumer holds no prefetched records)
    with pytest.raises(DataLossError, match=rf"{name}-0 offsets \[10, 20\)"):
        _read_all(OffsetRange(name, 0, 10, 30, strict=True), o)
    assert POOL.stats.closed == closed + 1 and "idle=0" in repr(POOL)  # failed: not pooled
    assert _read_all(OffsetRange(name, 0, 20, 30), o) == list(range(20, 30))
    POOL.clear()


def test_pool_is_bounded_and_closes_idle_consumers(kafka: Any, topic: Any, reader: str) -> None:
    name = topic(partitions=3)
    for p in range(3):
        kafka.produce(name, [(None, b"x")] * 5, partition=p)
    pool = ConsumerPool(capacity=2, idle_timeout_s=1.0)
    o = opts(kafka.bootstrap, reader=reader)
    consumers = []
    for p in range(3):
        from orderedstream.python_datasource.client_config import ClientErrors
        from orderedstream.python_datasource.consumers import open_consumer
        from orderedstream.python_datasource.reader import consumer_config

        errors = ClientErrors("test", o.secrets)
        consumer = pool.acquire(("k", p), 0, lambda p=p, e=errors: open_consumer(
            resolve(reader), consumer_config(o), name, p, e))
        consumers.append(consumer)
    for p, consumer in enumerate(consumers):
        pool.release(("k", p), consumer, 0)
    assert pool.stats.closed == 1 and "idle=2" in repr(pool)  # least recently used went
    deadline = time.monotonic() + 15
    while pool.stats.closed < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "idle=0" in repr(pool) and pool.stats.closed == 3
    off = ConsumerPool(capacity=0)
    off.release(("k", 0), pool.acquire(("k", 0), 0, lambda: open_consumer(
        resolve(reader), consumer_config(o), name, 0, ClientErrors("t", o.secrets))), 0)
    assert off.stats.closed == 1 and "idle=0" in repr(off)
