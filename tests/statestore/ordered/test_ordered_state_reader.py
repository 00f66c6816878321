"""``spark.read.format("rocksstate")`` over the ordered stage's state, resolved through the
batch commits of its Delta output table, against real Kafka, S3 (SeaweedFS) and Spark: the
rows equal ``OrderedStateful.read_state`` and ``orderedstream state get`` for the latest batch
and for ``batchId=0``; bad options, an uncommitted batch, a wrong path and state deleted by
retention fail with the pack's sentence first."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from orderedstream.core.errors import OptionError, StateNotFoundError
from orderedstream.statestore.ordered import OrderedStateful
from orderedstream.statestore.ordered.state_inspect import StateInspector
from orderedstream.statestore.ordered.state_source import json_text
from pyspark_rocksstate import DefaultSource
from tests.fixtures import unique
from tests.statestore.ordered.kafka_frames import kafka_batch
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYS, PER_KEY = 60, 6


def _processor(url: str, opts: dict, tmp_path: Path) -> OrderedStateful:
    return OrderedStateful(check_order, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema=ORDER_SCHEMA, storage_options=opts,
                           store_options={"local_dir": str(tmp_path / "local")},
                           output_format="delta", writer_id="orders",
                           writer_options={"partitionBy": "partition"})


def _read(spark: Any, url: str, opts: dict, **options: Any) -> Any:
    reader = (spark.read.format("rocksstate").option("path", f"{url}/state")
              .option("table", f"{url}/out").option("storage_options", json.dumps(opts)))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _message(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    return str(excinfo.value)


def _starts_early(excinfo: pytest.ExceptionInfo[BaseException], sentence: str) -> bool:
    """The pack's sentence starts within the first 300 characters of Spark's message."""
    return 0 <= _message(excinfo).find(sentence) < 300


@pytest.fixture
def two_batches(spark: Any, kafka: Any, topic: Any, s3: Any, tmp_path: Path
                ) -> tuple[str, dict, str, OrderedStateful]:
    """Two committed batches of the ordered stage (both Kafka partitions in each), Delta
    output and state on S3."""
    name = topic(partitions=2)
    records = ((f"k{i % KEYS}".encode(), str(i // KEYS).encode()) for i in range(KEYS * PER_KEY))
    assert kafka.produce(name, records) == KEYS * PER_KEY
    ends = kafka.end_offsets(name)
    halves = [{p: (e * i // 2, e * (i + 1) // 2) for p, e in ends.items()} for i in range(2)]
    url, opts = s3.url(unique("ordered-state")), dict(s3.storage_options)
    proc = _processor(url, opts, tmp_path)
    for i in range(2):
        assert not proc.process_batch(kafka_batch(spark, kafka.bootstrap, name, halves[i]),
                                      i).skipped
    spark.dataSource.register(DefaultSource)
    return url, opts, name, proc


def test_rocksstate_reads_the_ordered_stage_state_of_a_committed_batch(spark, two_batches,
                                                                      ) -> None:
    url, opts, name, proc = two_batches
    inspector = StateInspector(output=f"{url}/out", state=f"{url}/state", storage_options=opts)
    for batch in (None, 0):
        df = _read(spark, url, opts) if batch is None else _read(spark, url, opts, batchId=batch)
        assert df.rdd.getNumPartitions() == 2  # one Spark partition per Kafka partition
        rows = df.collect()
        expected_batch = 1 if batch is None else 0
        assert {r.batch_id for r in rows} == {expected_batch}
        assert {r.space for r in rows} == {"ordered_state"}
        got = {(r.topic, r.partition, bytes(r.key)): json.loads(r.value) for r in rows}
        want = {(name, p, key): value for p in (0, 1)
                for key, value in proc.read_state(name, p, batch)}
        assert got == want and len(got) == KEYS  # every key once, in its Kafka partition
        assert all(r.key_str == bytes(r.key).decode() and r.timeout_ms is None for r in rows)
        versions = {f"{name}/{p}": b.version
                    for p, b in ((int(pid.rpartition("/")[2]), b)
                                 for pid, b in inspector.partitions(batch).items())}
        assert {f"{r.topic}/{r.partition}": r.version for r in rows} == versions
        # the same sentence `orderedstream state get` prints for each key
        some = rows[len(rows) // 2]
        kv = inspector.value(some.topic, some.partition, bytes(some.key), batch)
        assert kv.exists and json_text(kv.value) == some.value
    # batch 0 saw the first half of each key's sequence, batch 1 all of it
    latest = {r.key_str: int(r.value) for r in _read(spark, url, opts).collect()}
    first = {r.key_str: int(r.value) for r in _read(spark, url, opts, batchId=0).collect()}
    assert set(latest.values()) == {PER_KEY - 1} and max(first.values()) < PER_KEY - 1
    only_p1 = _read(spark, url, opts, topic=name, partition=1).collect()
    assert {r.partition for r in only_p1} == {1} and 0 < len(only_p1) < KEYS
    # `orderedstream state` refusals: a partition the output never had, a state URL that is
    # not this output's (not "damaged state"), a history range backwards
    with pytest.raises(StateNotFoundError, match=rf"Kafka {name}/9 has no state as of batch 1 "
                                                 rf".*the partitions it has: {name}/0, {name}/1"):
        inspector.value(name, 9, b"k1")
    typo = StateInspector(output=f"{url}/out", state=f"{url}/typo", storage_options=opts)
    with pytest.raises(StateNotFoundError,
                       match=f"either {url}/typo is not this output's state location"):
        typo.value(name, 0, b"k1")
    with pytest.raises(OptionError, match="the first batch 5 is after the last batch 2"):
        list(inspector.history(name, 0, b"k1", first=5, last=2))


def test_rocksstate_on_ordered_state_refuses_bad_input_reason_first(spark, two_batches, s3,
                                                                    tmp_path) -> None:
    url, opts, name, proc = two_batches
    cases = [
        (dict(batchId=7), f"batch 7 is not committed at {url}/out (latest committed batch: 1)"),
        (dict(batchId="x"), "batchId='x': a committed batch id"),
        (dict(version=1), "option version='1' does not apply with option 'table'"),
        (dict(partition=5), f"batch 1 of {url}/out has no state for topic=* partition=5"),
    ]
    for options, sentence in cases:
        with pytest.raises(Exception) as excinfo:
            _read(spark, url, opts, **options).collect()
        assert _starts_early(excinfo, sentence), _message(excinfo)[:600]
    missing = s3.url(unique("no-such-table"))
    with pytest.raises(Exception) as excinfo:
        (spark.read.format("rocksstate").option("path", f"{url}/state").option("table", missing)
         .option("storage_options", json.dumps(opts)).load().collect())
    assert _starts_early(excinfo, f"{missing} holds no table"), _message(excinfo)[:600]
    with pytest.raises(Exception) as excinfo:
        (spark.read.format("rocksstate").option("path", f"{url}/elsewhere")
         .option("table", f"{url}/out").option("storage_options", json.dumps(opts)).load()
         .collect())
    assert _starts_early(excinfo, "rocksstate: the state of Kafka"), _message(excinfo)[:600]
    assert "option 'path' is not this query's state location" in _message(excinfo)
    # retention keeping the last batch deletes batch 0's versions (both partitions changed)
    proc.cleanup_state(keep_batches=1)
    with pytest.raises(Exception) as excinfo:
        _read(spark, url, opts, batchId=0).collect()
    text = _message(excinfo)
    assert _starts_early(excinfo, "rocksstate: the state of Kafka"), text[:600]
    assert f"as of batch 0 of {url}/out" in text and "retention deleted" in text, text[:600]
    assert len(_read(spark, url, opts).collect()) == KEYS  # the kept batch still reads
