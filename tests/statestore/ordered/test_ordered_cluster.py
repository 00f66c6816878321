"""Ordered processing on the standalone cluster: a Kafka partition whose task lands on another
executor restores its state there (real Spark master + 2 workers, real Kafka, real S3)."""

from __future__ import annotations

import re
import sys
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from orderedstream.statestore.ordered import OrderedStateful
from tests.statestore.ordered.kafka_frames import kafka_batch
from tests.statestore.ordered.order_check import check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.cluster
def test_partition_moved_to_another_executor_restores_its_state(
        cluster_spark, spark_cluster, kafka, topic, s3, s3_url) -> None:
    name = topic(partitions=2)
    keys, per_key = 400, 30
    records = ((f"k{i % keys}".encode(), str(i // keys).encode()) for i in range(keys * per_key))
    assert kafka.produce(name, records) == keys * per_key
    ends = kafka.end_offsets(name)
    thirds = [{p: (e * i // 3, e * (i + 1) // 3) for p, e in ends.items()} for i in range(3)]
    proc = OrderedStateful(check_order, state_location=f"{s3_url}/state",
                           output=f"{s3_url}/out", storage_options=s3.storage_options,
                           output_schema="key binary, partition int, offset long, seq long, "
                                         "violation int")

    def run(i: int) -> Any:
        return proc.process_batch(kafka_batch(cluster_spark, kafka.bootstrap, name,
                                              thirds[i]), i)

    first = run(0)
    placed = {c.partition_id: c for c in first.commits}
    assert len(placed) == 2 and all(c.executor for c in placed.values())
    moved_pid = f"{name}/0"
    worker = int(re.search(r"work-(\d+)", placed[moved_pid].metrics["cwd"]).group(1))
    spark_cluster.kill_worker(worker)  # its executor (and local state copies) are gone
    try:
        second = run(1)
        third = run(2)
    finally:
        spark_cluster.restart_worker(worker)
    after = {c.partition_id: c for c in second.commits}
    assert after[moved_pid].executor != placed[moved_pid].executor
    restore = after[moved_pid].metrics["restore"]
    assert restore["reused_local"] is False and restore["files_downloaded"] > 0
    assert restore["version"] == 0
    # The surviving executor keeps its copy for the next batch (no download).
    assert {c.partition_id: c.metrics["restore"]["reused_local"] for c in third.commits} == {
        f"{name}/0": True, f"{name}/1": True}

    out = proc.table().to_arrow()
    assert out.num_rows == keys * per_key
    assert pc.sum(out["violation"]).as_py() == 0
    final = {}
    for partition in ends:
        final.update(proc.read_state(name, partition))
    assert final == {f"k{i}".encode(): per_key - 1 for i in range(keys)}
