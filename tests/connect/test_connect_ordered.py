"""The ordered stage through Spark Connect (a ``pyspark.sql.connect`` session to a server in
another process): ``process_batch`` and ``apply`` + ``commit_batch`` in a query's
``foreachBatch`` (run on the server, the processor pickled there), batch frames processed from
the client, processing-time timeouts, a restart from the same checkpoint, placement's one
log line. Nothing lost, duplicated or reordered; exact row counts and per-key order."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from pyspark import cloudpickle

from orderedstream.app.job.figures import observed_metrics
from orderedstream.core.sparkmode import is_connect
from orderedstream.statestore.ordered import OrderedStateful, ProcessingTimeTimeout
from tests.connect.conftest import start_query
from tests.fixtures import unique
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])

NAME = "orderedstream"


def _produce(kafka: Any, name: str, keys: int, per_key: int, start: int = 0) -> int:
    records = [(f"k{i % keys}".encode(), str(start + i // keys).encode())
               for i in range(keys * per_key)]
    assert kafka.produce(name, records) == len(records)
    return len(records)


def _stage(url: str, opts: dict, tmp_path: Path, output_format: str = "delta",
           **kwargs: Any) -> OrderedStateful:
    return OrderedStateful(check_order, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema=ORDER_SCHEMA, storage_options=opts,
                           store_options={"local_dir": str(tmp_path / "local")},
                           output_format=output_format,  # type: ignore[arg-type]
                           writer_id="orders", **kwargs)


def _stream(spark: Any, kafka: Any, name: str, emit: str = "ranges") -> Any:
    return (spark.readStream.format("orderedkafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400")
            .option("emit", emit).load())


def _run(writer: Any, checkpoint: Path) -> Any:
    query = start_query(writer.option("checkpointLocation", str(checkpoint))
                        .trigger(availableNow=True))
    try:
        query.awaitTermination(600)
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return query


def _check_exactly_once(out: Any, total: int, keys: int) -> None:
    """Every record once, each key's values 0, 1, 2, ... in offset order."""
    assert out.num_rows == total
    assert pc.sum(out["violation"]).as_py() == 0
    coords = set(zip(out["partition"].to_pylist(), out["offset"].to_pylist(), strict=True))
    assert len(coords) == total
    per_key: dict[bytes, list[tuple[int, int]]] = {}
    for row in out.select(["key", "offset", "seq"]).to_pylist():
        per_key.setdefault(row["key"], []).append((row["offset"], row["seq"]))
    assert len(per_key) == keys
    for values in per_key.values():
        assert [s for _, s in sorted(values)] == list(range(len(values)))


def test_apply_and_commit_batch_through_connect_exactly_once_across_a_restart(
        connect, kafka, topic, s3, tmp_path: Path) -> None:
    assert is_connect(connect)
    url, opts = s3.url(unique("cx-inplan")), s3.storage_options
    name = topic(partitions=2)
    total = _produce(kafka, name, keys=20, per_key=30)
    stage = _stage(url, opts, tmp_path)
    checkpoint = tmp_path / "ckpt"
    query = _run(stage.apply(_stream(connect, kafka, name)).writeStream
                 .foreachBatch(stage.commit_batch), checkpoint)
    observed = [o for o in (observed_metrics(p, NAME) for p in query.recentProgress) if o]
    assert len(observed) >= 2, observed  # 600 records, 400 per trigger
    assert all("records" in o for o in observed), observed
    assert sum(int(o["records"]) for o in observed) == total
    _check_exactly_once(stage.table().to_arrow(), total, keys=20)
    # the same checkpoint again, more records: the new ones once, nothing twice
    total += _produce(kafka, name, keys=20, per_key=10, start=30)
    _run(stage.apply(_stream(connect, kafka, name)).writeStream
         .foreachBatch(stage.commit_batch), checkpoint)
    _check_exactly_once(stage.table().to_arrow(), total, keys=20)


def test_process_batch_in_foreach_batch_through_connect_with_fenced_parquet_output(
        connect, kafka, topic, s3, tmp_path: Path) -> None:
    url, opts = s3.url(unique("cx-parquet")), s3.storage_options
    name = topic(partitions=3)
    total = _produce(kafka, name, keys=30, per_key=20)
    stage = _stage(url, opts, tmp_path, output_format="parquet", placement="off")
    checkpoint = tmp_path / "ckpt"
    _run(_stream(connect, kafka, name, emit="records").writeStream
         .foreachBatch(stage.process_batch), checkpoint)
    _check_exactly_once(stage.table().to_arrow(), total, keys=30)
    total += _produce(kafka, name, keys=30, per_key=5, start=20)
    _run(_stream(connect, kafka, name, emit="records").writeStream
         .foreachBatch(stage.process_batch), checkpoint)
    _check_exactly_once(stage.table().to_arrow(), total, keys=30)
    states = stage.partition_states()
    ends = kafka.end_offsets(name)
    assert {pid: s.last_offset for pid, s in states.items()} == {
        f"{name}/{p}": e - 1 for p, e in ends.items()}


def _batch(spark: Any, kafka: Any, name: str, ranges: dict[int, tuple[int, int]]) -> Any:
    import json

    start = {name: {str(p): s for p, (s, _) in ranges.items()}}
    end = {name: {str(p): e for p, (_, e) in ranges.items()}}
    return (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", name).option("startingOffsets", json.dumps(start))
            .option("endingOffsets", json.dumps(end)).load())


def sessions(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    if state.has_timed_out:
        count = state.get()
        state.remove()
        return [(key.decode(), "closed", count)]
    count = state.get_option(0) + 1
    state.update(count)
    state.set_timeout_duration(1)  # 1 ms: due at the next batch
    return [(key.decode(), "open", count)]


def test_orderedkafka_batch_read_and_process_batch_timeouts_from_a_connect_client(
        connect, kafka, topic, s3, tmp_path: Path) -> None:
    name = topic(partitions=2)
    producer = kafka.producer()
    for key in ("a", "b", "c"):
        producer.produce(name, key=key, value=b"1", partition=0)
    for key in ("x", "y"):
        producer.produce(name, key=key, value=b"1", partition=1)
    assert producer.flush(30) == 0
    frame = _batch(connect, kafka, name, {0: (0, 3), 1: (0, 2)})
    rows = frame.select("key", "partition", "offset").collect()
    assert sorted((r["partition"], r["offset"], r["key"]) for r in rows) == [
        (0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c"), (1, 0, b"x"), (1, 1, b"y")]
    url = s3.url(unique("cx-timeouts"))
    proc = OrderedStateful(sessions, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema="key string, event string, count int",
                           storage_options=s3.storage_options,
                           store_options={"local_dir": str(tmp_path / "local")},
                           timeout=ProcessingTimeTimeout())
    proc.process_batch(frame, 0)
    producer.produce(name, key="a", value=b"2", partition=0)
    assert producer.flush(30) == 0
    # batch 1: one record of key "a" in partition 0, nothing for partition 1 (its timeouts
    # run as a job of their own: the items frame that replaces parallelize)
    result = proc.process_batch(_batch(connect, kafka, name, {0: (3, 4), 1: (2, 2)}), 1)
    out = proc.table().to_arrow(result.record.version).to_pylist()
    batch1 = [r for r in out if r["event"] == "closed" or r["count"] == 2]
    assert sorted((r["key"], r["event"], r["count"]) for r in batch1) == [
        ("a", "open", 2), ("b", "closed", 1), ("c", "closed", 1), ("x", "closed", 1),
        ("y", "closed", 1)]
    assert dict(proc.read_state(name, 0)) == {b"a": 2}
    assert dict(proc.read_state(name, 1)) == {}
    assert {c.partition_id: c.timeouts for c in result.commits} == {f"{name}/0": 2,
                                                                    f"{name}/1": 2}


def test_placement_degrades_with_one_log_line_through_connect(connect, kafka, topic, s3,
                                                              tmp_path: Path, caplog) -> None:
    import logging

    name = topic(partitions=2)
    total = _produce(kafka, name, keys=8, per_key=10)
    url = s3.url(unique("cx-placed"))
    stage = _stage(url, s3.storage_options, tmp_path, output_format="parquet",
                   placement="auto", checkpoint_location=str(tmp_path / "ckpt"))
    ends = kafka.end_offsets(name)
    with caplog.at_level(logging.INFO, logger="orderedstream"):
        assert not stage.placement.places(connect)
        stage.process_batch(_batch(connect, kafka, name, {p: (0, e // 2)
                                                          for p, e in ends.items()}), 0)
        stage.process_batch(_batch(connect, kafka, name, {p: (e // 2, e)
                                                          for p, e in ends.items()}), 1)
    lines = [r for r in caplog.records if "Spark Connect session" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    _check_exactly_once(stage.table().to_arrow(), total, keys=8)


def test_replay_of_a_batch_committed_through_connect_is_identical(
        connect, kafka, topic, s3, tmp_path: Path) -> None:
    from orderedstream.statestore.ordered.replay import replay

    url, opts = s3.url(unique("cx-replay")), s3.storage_options
    name = topic(partitions=1)
    total = _produce(kafka, name, keys=5, per_key=100)
    stage = _stage(url, opts, tmp_path)
    checkpoint = tmp_path / "ckpt"
    _run(stage.apply(_stream(connect, kafka, name)).writeStream
         .foreachBatch(stage.commit_batch), checkpoint)
    _check_exactly_once(stage.table().to_arrow(), total, keys=5)
    batches = [r.batch_id for r in stage.log.records()]
    assert len(batches) == 2  # 500 records, 400 per trigger
    for batch_id in batches:
        result = replay(output=f"{url}/out", state=f"{url}/state", checkpoint=str(checkpoint),
                        topic=name, partition=0, first=batch_id,
                        bootstrap_servers=kafka.bootstrap, storage_options=opts,
                        scratch=str(tmp_path / f"replay-{batch_id}"))
        assert result.identical, (batch_id, result.output.first, result.state.first)
