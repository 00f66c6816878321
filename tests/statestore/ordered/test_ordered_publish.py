"""The ordered stage and the fenced Parquet sink publish a batch through ONE path
(``orderedstream.sinks.commit``), against real Kafka, S3 (SeaweedFS) and Spark (local[2]).

Both are fed the same Kafka batch: their commit records have the same shape, Spark's
``_spark_metadata`` is derived from each record the same way (``spark.read.parquet`` agrees),
a replay after a crash between the record and its derivation repairs it the same way, and a
changed schema is refused the same way before anything is written.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from pyspark import cloudpickle

from orderedstream.core.commitlog import CommitLog
from orderedstream.core.errors import SchemaMismatchError
from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY
from orderedstream.dev.services.spark import s3a_conf
from orderedstream.sinks.foreach import FencedParquetBatchWriter
from orderedstream.sinks.table import SPARK_LOG_DIR, FencedTable
from orderedstream.statestore.ordered import OrderedStateful
from tests.statestore.ordered.kafka_frames import kafka_batch

# The user functions below travel to executors by value (this module is not importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

COLUMNS = "topic string, partition int, offset long"


def echo(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    return [(record["topic"], record["partition"], record["offset"])]


def _spark_log(url: str, opts: dict[str, Any]) -> dict[str, list[str]]:
    """``_spark_metadata`` of the table at ``url``: file name -> its lines."""
    table = FencedTable(url, opts)
    directory = f"{table.root}/{SPARK_LOG_DIR}"
    table.fs.invalidate_cache(directory)
    try:
        paths = table.fs.ls(directory, detail=False)
    except FileNotFoundError:
        return {}
    return {path.rsplit("/", 1)[-1]: table.fs.cat_file(path).decode().splitlines()
            for path in paths if path.rstrip("/") != directory}  # S3 lists an emptied dir


def _ordered(s3: Any, url: str, tmp_path: Any, schema: str = COLUMNS) -> OrderedStateful:
    return OrderedStateful(echo, state_location=f"{url}/state", output=f"{url}/ordered",
                           output_schema=schema, storage_options=s3.storage_options,
                           store_options={"local_dir": str(tmp_path / "local")},
                           writer_options={"partitionBy": "partition"})


def _sink(s3: Any, url: str) -> FencedParquetBatchWriter:
    return FencedParquetBatchWriter(f"{url}/sink", storage_options=s3.storage_options,
                                    writer_id="sink", partition_by="partition")


def test_the_ordered_stage_and_the_sink_publish_through_one_path(spark, kafka, topic, s3,
                                                                  s3_url, tmp_path) -> None:
    name = topic(partitions=2)
    assert kafka.produce(name, ((f"k{i}".encode(), b"v") for i in range(40))) == 40
    ends = kafka.end_offsets(name)
    frame = kafka_batch(spark, kafka.bootstrap, name, {p: (0, e) for p, e in ends.items()})
    opts = s3.storage_options
    urls = {"ordered": f"{s3_url}/ordered", "sink": f"{s3_url}/sink"}

    result = _ordered(s3, s3_url, tmp_path).process_batch(frame, 0)
    _sink(s3, s3_url)(frame.select("topic", "partition", "offset"), 0)

    # One record shape: batch 0 at version 0, the same table schema, the same rows, files
    # partitioned alike; the ordered stage adds its state manifests in ``extra``.
    records = {kind: CommitLog(url, opts).get(0) for kind, url in urls.items()}
    ordered, sink = records["ordered"], records["sink"]
    assert ordered is not None and sink is not None and result.record == ordered
    assert set(json.loads(ordered.to_json())) == set(json.loads(sink.to_json()))
    assert (ordered.version, ordered.batch_id, ordered.epoch) == (sink.version, sink.batch_id,
                                                                  sink.epoch) == (0, 0, 1)
    assert ordered.schema == sink.schema and ordered.rows == sink.rows == 40
    assert {tuple(f.partition.items()) for f in ordered.files} == {
        tuple(f.partition.items()) for f in sink.files} == {(("partition", str(p)),)
                                                            for p in ends if ends[p]}
    assert sorted(ordered.extra["ordered_state"]["partitions"]) == [
        f"{name}/{p}" for p in sorted(ends) if ends[p]]
    assert sink.extra == {"entry": "foreachBatch"}

    # One derivation: _spark_metadata/0 lists exactly the record's files, for both tables.
    logs = {kind: _spark_log(url, opts) for kind, url in urls.items()}
    for kind, url in urls.items():
        table = FencedTable(url, opts)
        assert list(logs[kind]) == ["0"]
        head, *entries = logs[kind]["0"]
        assert head == "v1"
        listed = {json.loads(line)["path"]: json.loads(line)["size"] for line in entries}
        assert listed == {table.spark_uri(f.path): f.size for f in records[kind].files}
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(s3.endpoint, ACCESS_KEY, SECRET_KEY, prefix="").items():
        hadoop.set(key, value)
    read = {kind: sorted(tuple(r) for r in spark.read.parquet(url.replace("s3://", "s3a://", 1))
                         .select("topic", "partition", "offset").collect())
            for kind, url in urls.items()}
    assert read["ordered"] == read["sink"] and len(read["ordered"]) == 40

    # One replay path: the driver died after the record, before Spark's log was derived.
    # A restarted run skips the batch and repairs _spark_metadata, identically for both.
    for url in urls.values():
        table = FencedTable(url, opts)
        table.fs.rm(f"{table.root}/{SPARK_LOG_DIR}", recursive=True)
        assert _spark_log(url, opts) == {}
    replayed = _ordered(s3, s3_url, tmp_path).process_batch(frame, 0)
    restarted = _sink(s3, s3_url)
    restarted(frame.select("topic", "partition", "offset"), 0)
    assert replayed.skipped and replayed.record == ordered and restarted.skipped == [0]
    assert {kind: _spark_log(url, opts) for kind, url in urls.items()} == logs

    # One schema check, before any task runs: a changed column type is refused by both.
    def objects(url: str) -> list[str]:
        table = FencedTable(url, opts)
        table.fs.invalidate_cache()
        return sorted(table.fs.find(table.root))

    before = {kind: objects(url) for kind, url in urls.items()}
    changed = _ordered(s3, s3_url, tmp_path, "topic string, partition string, offset long")
    mismatch = "column 'partition' changed type from int32 to string"
    with pytest.raises(SchemaMismatchError, match=mismatch):
        changed.process_batch(frame, 1)
    with pytest.raises(SchemaMismatchError, match=mismatch):
        _sink(s3, s3_url)(frame.selectExpr("topic", "cast(partition as string) as partition",
                                           "offset"), 1)
    assert {kind: objects(url) for kind, url in urls.items()} == before
