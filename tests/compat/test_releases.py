"""The compatibility part: every public feature on the installed Spark release, with no option
that needs a newer one. ``scripts/compat`` runs these on each other supported 4.x minor; the
main suite runs them on the default one. Real Kafka, S3 (SeaweedFS) and Spark; each streaming
query runs twice (Trigger.AvailableNow, new records in between), so its restart is covered."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark import cloudpickle

from orderedstream.core.sparkcompat import ADMISSION_CONTROL
from orderedstream.python_datasource import OrderedKafkaDataSource
from orderedstream.sinks.deltafiles import delta_storage_options
from orderedstream.sinks.deltaforeach import DeltaBatchWriter
from orderedstream.sinks.deltalog import DeltaBatchLog
from orderedstream.statestore.ordered import OrderedStateful
from orderedstream.statestore.ordered.replay import replay
from pyspark_rocksstate import DefaultSource as RocksState
from tests.fixtures import unique
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.compat

KEYS = 30


def _records(first: int, count: int) -> list[tuple[bytes, bytes]]:
    """Record i is key ``k{i % KEYS}``'s value ``i // KEYS``: each key's sequence 0, 1, 2..."""
    return [(f"k{i % KEYS}".encode(), str(i // KEYS).encode()) for i in range(first, first + count)]


def register(spark: Any, source: Any) -> None:
    """Register ``source``; Spark 4.0 refuses a name its static discovery already registered
    (the pack's ``pyspark_*`` modules), 4.1 and later replace it."""
    try:
        spark.dataSource.register(source)
    except Exception as exc:  # noqa: BLE001 - AnalysisException
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise


def _stream(spark: Any, kafka: Any, name: str, **options: str) -> Any:
    register(spark, OrderedKafkaDataSource)
    reader = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
              .option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run(writer: Any, checkpoint: Path) -> None:
    """One Trigger.AvailableNow run of ``writer`` (a DataStreamWriter) to its end."""
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def _twice(kafka: Any, name: str, total: int, run: Callable[[], Any]) -> list[Any]:
    """Produce half the records, run, produce the rest, run again (a restart)."""
    half = total // 2
    assert kafka.produce(name, _records(0, half)) == half
    results = [run()]
    assert kafka.produce(name, _records(half, total - half)) == total - half
    results.append(run())
    return results


def _stage(url: str, opts: dict, tmp_path: Path, output_format: str = "delta") -> OrderedStateful:
    return OrderedStateful(check_order, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema=ORDER_SCHEMA, storage_options=opts,
                           store_options={"local_dir": str(tmp_path / "local")},
                           output_format=output_format,  # type: ignore[arg-type]
                           writer_id="orders", writer_options={"partitionBy": "partition"})


def _exact(table: Any, total: int) -> None:
    """Every record once, each key's sequence unbroken."""
    assert table.num_rows == total and pc.sum(table["violation"]).as_py() == 0


def test_source_batch_and_stream_reads_every_record_once_in_order(spark, kafka, topic,
                                                                  tmp_path) -> None:
    name = topic(partitions=2)
    seen: list[tuple[int, int, int]] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        seen.extend((batch_id, r.partition, r.offset)
                    for r in batch_df.select("partition", "offset").collect())

    _twice(kafka, name, 400, lambda: _run(_stream(spark, kafka, name).writeStream
                                          .foreachBatch(collect), tmp_path / "ckpt"))
    ends = kafka.end_offsets(name)
    for p, end in ends.items():  # each partition's offsets once, in order across batches
        assert [o for _b, q, o in sorted(seen) if q == p] == list(range(end))
    batch = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", name).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").load().select("partition", "offset").collect())
    assert sorted((r.partition, r.offset) for r in batch) == sorted(
        (p, o) for p, end in ends.items() for o in range(end))


def test_rate_limits_work_or_name_the_spark_release_they_need(spark, kafka, topic,
                                                               tmp_path) -> None:
    name = topic(partitions=1)
    if not ADMISSION_CONTROL:  # refused at load(), before any query starts
        for option in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger"):
            with pytest.raises(Exception, match=rf"option '{option}' .* needs Spark 4\.2"):
                _stream(spark, kafka, name, **{option: "10"})
        return
    assert kafka.produce(name, _records(0, 50)) == 50
    batches: list[int] = []
    _run(_stream(spark, kafka, name, maxOffsetsPerTrigger="10").writeStream
         .foreachBatch(lambda df, batch_id: batches.append(df.count())), tmp_path / "ckpt")
    assert batches == [10] * 5


def test_ordered_stage_in_foreach_batch_delta_replay_and_rocksstate(spark, kafka, topic, s3,
                                                                    tmp_path) -> None:
    url, opts = s3.url(unique("compat-fb")), s3.storage_options
    name = topic(partitions=2)

    def run() -> OrderedStateful:
        stage = _stage(url, opts, tmp_path)
        _run(_stream(spark, kafka, name).writeStream.foreachBatch(stage.process_batch),
             tmp_path / "ckpt")
        return stage

    stage = _twice(kafka, name, 600, run)[-1]
    _exact(stage.table().to_arrow(), 600)
    batches = [r.batch_id for r in DeltaBatchLog(f"{url}/out", opts, writer_id="orders").records()]
    assert batches == list(range(len(batches))) and len(batches) >= 2
    result = replay(output=f"{url}/out", state=f"{url}/state", checkpoint=str(tmp_path / "ckpt"),
                    topic=name, partition=0, first=0, bootstrap_servers=kafka.bootstrap,
                    storage_options=opts, scratch=str(tmp_path / "replay"))
    assert result.identical
    register(spark, RocksState)
    state = (spark.read.format("rocksstate").option("path", f"{url}/state")
             .option("table", f"{url}/out").option("storage_options", json.dumps(opts)).load()
             .collect())
    assert len(state) == KEYS  # each key's last value: its sequence's end
    assert {r.key_str: int(r.value) for r in state} == {f"k{k}": 600 // KEYS - 1
                                                        for k in range(KEYS)}


@pytest.mark.parametrize("output_format", ["delta", "parquet"])
def test_ordered_stage_in_plan_apply_and_commit_batch(spark, kafka, topic, s3, tmp_path,
                                                      output_format) -> None:
    url, opts = s3.url(unique("compat-plan")), s3.storage_options
    name = topic(partitions=2)

    def run() -> OrderedStateful:
        stage = _stage(url, opts, tmp_path, output_format)
        frame = stage.apply(_stream(spark, kafka, name, emit="ranges"))
        _run(frame.writeStream.foreachBatch(stage.commit_batch), tmp_path / "ckpt")
        return stage

    stage = _twice(kafka, name, 600, run)[-1]
    _exact(stage.table().to_arrow(), 600)


def _delta_rows(url: str, opts: dict) -> int:
    return DeltaTable(url, storage_options=delta_storage_options(url, opts)).to_pyarrow_table(
        ).num_rows


def test_sinks_fenceddelta_fencedparquet_and_the_delta_batch_writer(spark, kafka, topic, s3,
                                                                     tmp_path) -> None:
    from orderedstream.sinks.datasource import FencedParquetDataSource
    from orderedstream.sinks.deltasource import FencedDeltaDataSource
    from orderedstream.sinks.table import FencedTable

    register(spark, FencedDeltaDataSource)
    register(spark, FencedParquetDataSource)
    opts = s3.storage_options
    urls = {sink: s3.url(unique(f"compat-{sink}")) for sink in ("delta", "parquet", "writer")}
    name = topic(partitions=2)

    def run() -> None:
        rows = _stream(spark, kafka, name).selectExpr("topic", "partition", "offset",
                                                      "cast(value as string) v")
        for sink in ("fenceddelta", "fencedparquet"):
            url = urls[sink.removeprefix("fenced")]
            _run(rows.writeStream.format(sink).option("path", url)
                 .option("storageOptions", json.dumps(opts)).option("writerId", "ds")
                 .option("partitionBy", "partition"), tmp_path / sink)
        writer = DeltaBatchWriter(urls["writer"], storage_options=opts, writer_id="events",
                                  partition_by=["partition"])
        _run(rows.writeStream.foreachBatch(writer), tmp_path / "writer")

    _twice(kafka, name, 500, run)
    assert _delta_rows(urls["delta"], opts) == 500
    assert _delta_rows(urls["writer"], opts) == 500
    parquet = FencedTable(urls["parquet"], opts).to_arrow()
    assert sorted(zip(parquet["partition"].to_pylist(), parquet["offset"].to_pylist())) == \
        sorted((p, o) for p, end in kafka.end_offsets(name).items() for o in range(end))


def test_the_jvm_archive_training_stream_runs(spark, tmp_path) -> None:
    """The JVM archive's training workload: a Python stream reader written for every release."""
    from orderedstream.dev.services._cds_training import TICKS, run_training

    run_training(spark, tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoint" / "commits").iterdir()
                  if not p.name.startswith(".")) == ["0"]
    assert json.loads((tmp_path / "checkpoint" / "offsets" / "0").read_text().splitlines()[-1]
                      ) == {"n": TICKS}
