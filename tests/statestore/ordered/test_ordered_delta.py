"""The ordered stage and the foreachBatch writer writing Delta Lake, against real Kafka, real
S3 (SeaweedFS) or local disk, and real Spark: one Delta commit per batch holding the files,
the state manifests and the Kafka offsets; a replay skipped; a second checkpoint's batch
refused; delta-rs, Polars and DuckDB counting exactly the committed rows beside the files a
crashed attempt left behind."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark import cloudpickle

from orderedstream.core.errors import CommitConflictError
from orderedstream.sinks.deltafiles import delta_storage_options
from orderedstream.sinks.deltaforeach import DeltaBatchWriter
from orderedstream.sinks.deltalog import DeltaBatchLog, open_batch_log
from orderedstream.statestore.ordered import OrderedStateful
from orderedstream.statestore.ordered.plan import BatchPlan, bases_from_extra
from orderedstream.statestore.ordered.runner import OrderedTask
from tests.fixtures import unique
from tests.statestore.ordered.kafka_frames import kafka_batch
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# local disk: the same code path as S3 with another filesystem; the long run is slow-marked
@pytest.fixture(params=["s3", pytest.param("local", marks=pytest.mark.slow)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "local":
        return str(tmp_path / unique("lake")), {}
    s3 = request.getfixturevalue("s3")
    return s3.url(unique("lake")), s3.storage_options


def _processor(url: str, opts: dict, tmp_path: Path, **kw: Any) -> OrderedStateful:
    return OrderedStateful(check_order, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema=ORDER_SCHEMA, storage_options=opts,
                           store_options={"local_dir": str(tmp_path / "local")},
                           output_format="delta", writer_id="orders",
                           writer_options={"partitionBy": "partition"}, **kw)


def _counts(url: str, opts: dict) -> dict[str, int]:
    storage = delta_storage_options(url, opts)
    table = DeltaTable(url, storage_options=storage)
    dataset = table.to_pyarrow_dataset()  # noqa: F841 - DuckDB scans the Python variable
    return {"delta-rs": table.to_pyarrow_table().num_rows,
            "polars": pl.read_delta(url, storage_options=storage or None).height,
            "duckdb": duckdb.sql("select count(*) from dataset").fetchall()[0][0]}


def test_ordered_stage_delta_replay_crash_and_second_checkpoint(spark, kafka, topic, where,
                                                                tmp_path) -> None:
    url, opts = where
    name = topic(partitions=2)
    keys, per_key = 200, 30
    records = ((f"k{i % keys}".encode(), str(i // keys).encode()) for i in range(keys * per_key))
    assert kafka.produce(name, records) == keys * per_key
    ends = kafka.end_offsets(name)
    thirds = [{p: (e * i // 3, e * (i + 1) // 3) for p, e in ends.items()} for i in range(3)]

    def frames(i: int, ranges: list[dict[int, tuple[int, int]]] = thirds) -> Any:
        return kafka_batch(spark, kafka.bootstrap, name, ranges[i])

    crashed = _processor(url, opts, tmp_path)
    first = crashed.process_batch(frames(0), 0)
    assert not first.skipped and first.output_rows == sum(e // 3 for e in ends.values())
    # batch 1's stage runs (files + state candidates written), the driver dies before commit
    task = OrderedTask(crashed.options, check_order,
                       BatchPlan(1, 0, crashed.partition_states()), crashed.sink)
    orphans = frames(1).mapInArrow(task, "commit string").collect()
    assert len(orphans) == 2 and crashed.log.get(1) is None
    restarted = _processor(url, opts, tmp_path)
    done = restarted.process_batch(frames(1), 1)
    assert not done.skipped
    again = restarted.process_batch(frames(1), 1)  # Spark replays it: same offsets, skipped
    assert again.skipped and again.record.version == done.record.version
    restarted.process_batch(frames(2), 2)
    total = sum(ends.values())
    out = DeltaTable(f"{url}/out", storage_options=delta_storage_options(url, opts))
    assert out.version() == 2 and out.transaction_version("orders") == 2
    got = out.to_pyarrow_table()
    assert got.num_rows == total and pc.sum(got["violation"]).as_py() == 0
    assert len(set(zip(got["partition"].to_pylist(), got["offset"].to_pylist(),
                       strict=True))) == total
    # the crashed attempt's files are in the folder; every reader sees the committed rows only
    assert _counts(f"{url}/out", opts) == {"delta-rs": total, "polars": total, "duckdb": total}
    # each Delta commit names every partition's state manifest and the offsets it covered
    log = open_batch_log(f"{url}/out", opts)
    assert isinstance(log, DeltaBatchLog)
    entry = log.batch_entry(2)
    assert entry is not None
    assert entry.offsets == {f"{name}/{p}": [thirds[2][p][0], thirds[2][p][1]] for p in ends}
    bases = bases_from_extra(entry.record.extra)
    assert {b.version for b in bases.values()} == {2} and len(bases) == 2
    assert dict(restarted.read_state(name, 0))  # state version 2 reads back
    cleaned = restarted.cleanup_state(keep_batches=1)  # retention follows the Delta log
    assert (cleaned.latest_batch, cleaned.oldest_retained_batch) == (2, 2)
    assert cleaned.manifests_deleted >= 2 and dict(restarted.read_state(name, 1))
    # a second checkpoint (other batch boundaries) on the same table: batch 0 is refused
    halves = [{p: (0, e // 2) for p, e in ends.items()}]
    second = _processor(url, opts, tmp_path / "second")
    with pytest.raises(CommitConflictError, match=r"batch 0 of .* covers"):
        second.process_batch(frames(0, halves), 0)
    assert DeltaTable(f"{url}/out", storage_options=delta_storage_options(url, opts)
                      ).version() == 2


@pytest.mark.parametrize("emit", ["records", "ranges"])
def test_streaming_ordered_query_writes_delta_with_a_restart(spark, kafka, topic, s3, tmp_path,
                                                             emit) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    url, opts = s3.url(unique("stream")), s3.storage_options
    name = topic(partitions=3)
    keys, per_key = 300, 20
    records = [(f"k{i % keys}".encode(), str(i // keys).encode()) for i in range(keys * per_key)]
    half = len(records) // 2
    assert kafka.produce(name, records[:half]) == half

    def run_query() -> OrderedStateful:
        proc = _processor(url, opts, tmp_path)
        frame = (spark.readStream.format("orderedkafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
                 .option("emit", emit).load())
        query = (frame.writeStream.foreachBatch(proc.process_batch)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        return proc

    run_query()
    assert kafka.produce(name, records[half:]) == len(records) - half
    proc = run_query()
    got = proc.table().to_arrow()
    assert got.num_rows == len(records) and pc.sum(got["violation"]).as_py() == 0
    log = DeltaBatchLog(f"{url}/out", opts, writer_id="orders")
    batches = [r.batch_id for r in log.records()]
    assert batches == list(range(len(batches))) and len(batches) >= 6  # 1000 per trigger
    covered = sum(e[1] - e[0] for r in log.entries() for e in r.offsets.values())
    assert covered == len(records)


def test_foreach_batch_writer_writes_delta_exactly_once(spark, kafka, topic, where,
                                                        tmp_path) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    url, opts = where
    name = topic(partitions=2)
    assert kafka.produce(name, ((f"k{i}".encode(), str(i).encode()) for i in range(3000))) == 3000

    def run_query(writer_id: str, checkpoint: str) -> DeltaBatchWriter:
        sink = DeltaBatchWriter(f"{url}/events", storage_options=opts, writer_id=writer_id,
                                partition_by=["partition"])
        frame = (spark.readStream.format("orderedkafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "700")
                 .load().selectExpr("topic", "partition", "offset", "cast(value as string) v"))
        query = (frame.writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return sink

    sink = run_query("events", "ckpt")
    assert sink.last_record is not None
    # replaying the last batch (same offsets) is skipped: nothing new is committed
    last = sink.log.latest_batch_record()
    assert last is not None and last.batch_id is not None
    replay = kafka_batch(spark, kafka.bootstrap, name,
                         {int(k.rsplit("/", 1)[1]): tuple(v)
                          for k, v in sink.log.batch_entry(last.batch_id).offsets.items()})
    again = DeltaBatchWriter(f"{url}/events", storage_options=opts, writer_id="events",
                             partition_by=["partition"])
    again(replay.selectExpr("topic", "partition", "offset", "cast(value as string) v"),
          last.batch_id)
    assert again.skipped == [last.batch_id]
    assert _counts(f"{url}/events", opts) == {"delta-rs": 3000, "polars": 3000, "duckdb": 3000}
    # a fresh checkpoint under the same writer id: its batch 0 differs (other trigger size)
    with pytest.raises(Exception, match="CommitConflictError|covers"):
        sink2 = DeltaBatchWriter(f"{url}/events", storage_options=opts, writer_id="events",
                                 partition_by=["partition"])
        frame = (spark.readStream.format("orderedkafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100")
                 .load().selectExpr("topic", "partition", "offset", "cast(value as string) v"))
        query = (frame.writeStream.foreachBatch(sink2)
                 .option("checkpointLocation", str(tmp_path / "ckpt2"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    assert _counts(f"{url}/events", opts)["delta-rs"] == 3000


def test_fenceddelta_data_source_sink(spark, kafka, topic, s3, tmp_path) -> None:
    import json

    from orderedstream.python_datasource import OrderedKafkaDataSource
    from orderedstream.sinks.deltasource import FencedDeltaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    spark.dataSource.register(FencedDeltaDataSource)
    url, opts = s3.url(unique("dsdelta")), s3.storage_options
    name = topic(partitions=2)
    assert kafka.produce(name, ((f"k{i}".encode(), str(i).encode()) for i in range(2000))) == 2000

    def start(checkpoint: str, per_trigger: int) -> Any:
        frame = (spark.readStream.format("orderedkafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
                 .option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(per_trigger)).load()
                 .selectExpr("topic", "partition", "offset", "cast(value as string) v"))
        return (frame.writeStream.format("fenceddelta").option("path", url)
                .option("storageOptions", json.dumps(opts)).option("writerId", "ds")
                .option("partitionBy", "partition")
                .option("checkpointLocation", str(tmp_path / checkpoint))
                .trigger(availableNow=True).start())

    start("ck-a", 600).awaitTermination()
    assert _counts(url, opts) == {"delta-rs": 2000, "polars": 2000, "duckdb": 2000}
    log = DeltaBatchLog(url, opts, writer_id="ds")
    assert [r.batch_id for r in log.records()] == [0, 1, 2, 3]
    with pytest.raises(Exception, match="covers"):  # another checkpoint, same writer id
        start("ck-b", 250).awaitTermination()
    assert _counts(url, opts)["delta-rs"] == 2000
    assert kafka.produce(name, ((b"k", b"x") for _ in range(10))) == 10
    start("ck-a", 600).awaitTermination()  # the first query resumes: its next batch once
    assert DeltaTable(url, storage_options=delta_storage_options(url, opts)
                      ).to_pyarrow_table().num_rows == 2010
