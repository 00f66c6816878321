"""The ordered stage inside the streaming plan (``OrderedStateful.apply`` / ``commit_batch``),
on real Kafka, S3 (SeaweedFS) and Spark: Spark's own progress carries the stage's figures,
equal to what each batch committed; a replayed batch is skipped (same Kafka ranges) or
refused (another checkpoint's ranges); nothing lost, duplicated or reordered."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException

from orderedstream.core.errors import OptionError
from orderedstream.sinks.deltalog import DeltaBatchLog
from orderedstream.statestore.ordered import BatchResult, OrderedStateful
from tests.fixtures import unique
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])

NAME = "orderedstream"


def _stage(url: str, opts: dict, tmp_path: Path, output_format: str = "delta",
           ) -> OrderedStateful:
    return OrderedStateful(check_order, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema=ORDER_SCHEMA, storage_options=opts,
                           store_options={"local_dir": str(tmp_path / "local")},
                           output_format=output_format,  # type: ignore[arg-type]
                           writer_id="orders", writer_options={"partitionBy": "partition"})


def _run(spark: Any, kafka: Any, name: str, stage: OrderedStateful, checkpoint: Path, *,
         emit: str = "ranges", per_trigger: int = 1000) -> tuple[Any, list[BatchResult]]:
    """One Trigger.AvailableNow run with the in-plan stage: (query, each batch's result)."""
    results: list[BatchResult] = []

    def commit(batch_df: Any, batch_id: int) -> None:
        results.append(stage.commit_batch(batch_df, batch_id))

    frame = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(per_trigger)).option("emit", emit).load())
    query = (stage.apply(frame).writeStream.foreachBatch(commit)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(600)
    except StreamingQueryException:
        pass  # the caller reads query.exception()
    finally:
        query.stop()
    return query, results


def _observed(query: Any) -> dict[int, dict[str, Any]]:
    return {int(p["batchId"]): p["observedMetrics"][NAME].asDict() for p in query.recentProgress
            if NAME in (p.get("observedMetrics") or {})}


@pytest.mark.parametrize("emit", ["ranges", "records"])
def test_progress_carries_the_stage_figures_each_batch_committed(spark, kafka, topic, s3,
                                                                 tmp_path: Path, emit) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    url, opts = s3.url(unique("inplan")), s3.storage_options
    name = topic(partitions=3)
    records = [(f"k{i % 50}".encode(), str(i // 50).encode()) for i in range(2500)]
    assert kafka.produce(name, records) == len(records)
    stage = _stage(url, opts, tmp_path)
    query, results = _run(spark, kafka, name, stage, tmp_path / "ckpt", emit=emit)
    assert query.exception() is None
    observed = _observed(query)
    assert len(results) >= 3 and sorted(observed) == [r.batch_id for r in results]
    for result in results:  # Spark's figures are the committed ones, batch by batch
        seen = observed[result.batch_id]
        assert not result.skipped and seen["records"] == result.records > 0
        assert seen["output_rows"] == result.output_rows == result.record.rows
        assert seen["output_files"] == len(result.record.files) > 0
        after = stage.partition_states(result.batch_id).values()  # every Kafka partition
        assert seen["state_keys"] == sum(b.num_keys or 0 for b in after) > 0
        assert seen["state_bytes"] == sum(b.state_bytes or 0 for b in after) > 0
        assert all(b.state_bytes for b in after)
        assert seen["restores"] == result.restores
        assert seen["kafka_partitions"] == len({c.partition_id for c in result.commits})
        slowest = max(c.metrics["commit_s"] for c in result.commits) * 1000
        assert seen["state_commit_ms"] == pytest.approx(slowest) and slowest > 0
    got = stage.table().to_arrow()  # every record once, in order per key
    assert got.num_rows == sum(m["output_rows"] for m in observed.values()) == len(records)
    assert pc.sum(got["violation"]).as_py() == 0
    log = DeltaBatchLog(f"{url}/out", opts, writer_id="orders")
    assert sum(e[1] - e[0] for r in log.entries() for e in r.offsets.values()) == len(records)


@pytest.mark.parametrize("output_format", ["delta", "parquet"])
def test_replay_is_skipped_and_another_checkpoint_is_refused(spark, kafka, topic, s3,
                                                             tmp_path: Path,
                                                             output_format) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    url, opts = s3.url(unique("inreplay")), s3.storage_options
    name = topic(partitions=2)
    records = [(f"k{i % 20}".encode(), str(i // 20).encode()) for i in range(1200)]
    assert kafka.produce(name, records) == len(records)
    checkpoint = tmp_path / "ckpt"
    query, first = _run(spark, kafka, name, _stage(url, opts, tmp_path, output_format),
                        checkpoint, per_trigger=500)
    assert query.exception() is None and len(first) >= 2
    last = first[-1].batch_id
    # a crash after the commit, before Spark's own commit: the batch runs again on restart
    for path in (checkpoint / "commits").glob(f"*{last}*"):
        if path.name in (str(last), f".{last}.crc"):
            path.unlink()
    stage = _stage(url, opts, tmp_path, output_format)
    query, again = _run(spark, kafka, name, stage, checkpoint, per_trigger=500)
    assert query.exception() is None
    assert [(r.batch_id, r.skipped) for r in again] == [(last, True)]
    assert again[0].record.files == first[-1].record.files
    seen = _observed(query)[last]  # a skipped replay reports no work of the stage
    assert seen["records"] == seen["output_rows"] == seen["output_files"] == 0
    got = stage.table().to_arrow()
    assert got.num_rows == len(records) and pc.sum(got["violation"]).as_py() == 0
    if output_format == "delta":  # another checkpoint's batch 0 covers other Kafka ranges
        query, refused = _run(spark, kafka, name, _stage(url, opts, tmp_path, output_format),
                              tmp_path / "ckpt2", per_trigger=300)
        assert refused == []
        assert "CommitConflictError" in str(query.exception()) and "covers" in str(
            query.exception())
        assert stage.table().to_arrow().num_rows == len(records)


def test_apply_refuses_a_batch_frame_and_commit_batch_refuses_other_rows(
        spark, kafka, topic, s3, tmp_path: Path) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    stage = _stage(s3.url(unique("inbad")), s3.storage_options, tmp_path)
    frame = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", topic(partitions=1)).load())
    with pytest.raises(OptionError, match="streaming DataFrame"):
        stage.apply(frame)
    with pytest.raises(OptionError, match="commits the rows of OrderedStateful.apply"):
        stage.commit_batch(frame, 0)
    # the stage's DataFrame run by another foreachBatch function has no plan: refused, no rows
    name = topic(partitions=1)
    assert kafka.produce(name, [(b"k", b"0")]) == 1
    stream = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
              .option("startingOffsets", "earliest").option("emit", "ranges").load())
    query = (stage.apply(stream).writeStream.foreachBatch(lambda df, _id: df.collect())
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
             .start())
    with pytest.raises(StreamingQueryException, match="runs only inside its query's"):
        query.awaitTermination(300)
    query.stop()
    assert stage.log.latest() is None
