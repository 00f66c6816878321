"""Executor-sticky placement of the ordered stage on the standalone cluster (2 workers, one
1-core executor each), through a real ``readStream.format("orderedkafka")`` query whose
``foreachBatch`` is ``OrderedStateful.process_batch`` (real Kafka, real S3, real Spark).

With ``checkpoint_location`` (and the JVM shim on the classpath) each Kafka partition's task
runs where its state was committed, so over the 20 batches after the warm-up (batches 0-1)
nothing is restored from S3; with ``placement="off"`` Spark's own placement moves partitions
and they restore. After a worker is lost its partitions move to the survivor once, restore
once, and output stays exactly-once. (22 batches also run the automatic state cleanup twice,
after batches 9 and 19, before the final state is read back.)
"""

from __future__ import annotations

import itertools
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from orderedstream.core import jvm
from orderedstream.core.errors import OptionError, ShimBuildError
from orderedstream.dev import shim
from orderedstream.dev.services.process import wait_until
from orderedstream.statestore.ordered import BatchResult, OrderedStateful
from orderedstream.statestore.ordered.placement import OffsetLogMismatch, kafka_partition_order
from tests.statestore.ordered.order_check import ORDER_SCHEMA as SCHEMA
from tests.statestore.ordered.order_check import check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# The cluster session puts the bundled jar on spark.jars when it starts: build it (stamped,
# a no-op when current) at collection time, before any session of this run exists.
try:
    shim.build(quiet=True)
except ShimBuildError:  # reported by the tests that need it
    pass

PARTITIONS = 4
KEYS = 40                     # keys per run, spread over the partitions by Kafka's partitioner
PER_BATCH = 10 * PARTITIONS   # records per micro-batch (maxOffsetsPerTrigger)
WARM_UP = 2                   # batches 0-1: no preference yet, then the first placed batch
# Micro-batches per mode (one value per key per batch): with the shim, 20 batches after the
# warm-up must restore nothing; without it, 8 batches show restores (Spark moves about a third
# of the tasks per batch on this cluster) while keeping the test's run time modest.
BATCHES = {"auto": WARM_UP + 20, "off": 8}


def _produce(kafka: Any, name: str, first_seq: int, per_key: int) -> int:
    """``per_key`` more values for every key (explicit partition: key i -> partition i % 4)."""
    producer = kafka.producer()
    count = 0
    for seq in range(first_seq, first_seq + per_key):
        for k in range(KEYS):
            producer.produce(name, key=f"k{k}".encode(), value=str(seq).encode(),
                             partition=k % PARTITIONS)
            count += 1
    assert producer.flush(60) == 0, "records left undelivered"
    return count


def _run(spark: Any, kafka: Any, name: str, proc: OrderedStateful, checkpoint: str,
         emit: str = "records") -> list[BatchResult]:
    """One Trigger.AvailableNow run of the query; the BatchResult of every batch it ran.
    ``emit="ranges"``: the source yields offset ranges and the ordered tasks read them."""
    results: list[BatchResult] = []

    def on_batch(batch_df: Any, batch_id: int) -> None:
        results.append(proc.process_batch(batch_df, batch_id))

    stream = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(PER_BATCH)).option("emit", emit).load())
    query = (stream.writeStream.foreachBatch(on_batch).trigger(availableNow=True)
             .option("checkpointLocation", checkpoint).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return results


def _processor(name: str, s3: Any, s3_url: str, checkpoint: str | None, **kwargs: Any
               ) -> OrderedStateful:
    return OrderedStateful(check_order, state_location=f"{s3_url}/state/{name}",
                           output=f"{s3_url}/out/{name}", storage_options=s3.storage_options,
                           output_schema=SCHEMA, checkpoint_location=checkpoint, **kwargs)


@pytest.fixture
def patient_locality(cluster_spark: Any) -> Any:
    """``spark.locality.wait`` of 60 s while the test runs (restored after).

    A task waits that long for its preferred executor while the executor is busy with the
    batch's other task; with Spark's default 3 s, a task queued behind a slow one (a loaded
    machine) would run on the other executor and restore there, making the count of
    restores depend on timing. (All executors here share one host, so the NODE_LOCAL level
    that follows PROCESS_LOCAL accepts any of them.) Task sets read the live SparkConf when
    they are created.
    """
    conf = cluster_spark.sparkContext._conf
    before = conf.get("spark.locality.wait")
    conf.set("spark.locality.wait", "60s")
    yield cluster_spark
    if before is None:
        conf._jconf.remove("spark.locality.wait")
    else:
        conf.set("spark.locality.wait", before)


def _two_executors(spark: Any) -> None:
    placement = jvm.Placement(spark)
    assert placement.available, "the cluster session started without the shim jar"
    wait_until(lambda: len(placement.executors()) == 2, 180,
               "both workers' executors to register with the driver")


def _assert_exactly_once(proc: OrderedStateful, name: str, produced: int, per_key: int
                         ) -> None:
    out = proc.table().to_arrow()
    assert out.num_rows == produced
    assert pc.sum(out["violation"]).as_py() == 0
    pairs = set(zip(out["partition"].to_pylist(), out["offset"].to_pylist(), strict=True))
    assert len(pairs) == produced, "an input record was output twice"
    state: dict[Any, Any] = {}
    for partition in range(PARTITIONS):
        state.update(proc.read_state(name, partition))
    assert state == {f"k{k}".encode(): per_key - 1 for k in range(KEYS)}


def _summary(label: str, results: list[BatchResult]) -> str:
    return f"{label}: " + " ".join(
        f"b{r.batch_id}:{r.restores}r/{r.bytes_downloaded}B" for r in results)


def test_options_are_validated() -> None:
    schema = pa.schema([("seq", pa.int64())])
    with pytest.raises(OptionError, match="placement='sometimes'.*'auto', 'off'"):
        OrderedStateful(check_order, state_location="/tmp/s", output="/tmp/o",
                        output_schema=schema, placement="sometimes")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="checkpoint_location"):
        OrderedStateful(check_order, state_location="/tmp/s", output="/tmp/o",
                        output_schema=schema, checkpoint_location="")


def test_partition_order_from_the_offset_log(tmp_path: Path) -> None:
    """Index -> Kafka partition as orderedkafka plans it: partitions with data, sorted."""
    log = tmp_path / "offsets"
    log.mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1}'
    start = ('{"loss":{"events":0,"records":0},"newPartitions":{},"offsets":{"b":{"0":5},'
             '"a":{"0":3,"1":7,"2":0}},"topicIds":{"a":"ia","b":"ib"}}')
    end = ('{"loss":{"events":0,"records":0},"newPartitions":{"a":{"3":0}},"offsets":'
           '{"b":{"0":9},"a":{"0":3,"1":8,"2":4,"3":2}},"topicIds":{"a":"ia","b":"ib"}}')
    (log / "0").write_text(f"v1\n{meta}\n{start}")
    (log / "1").write_text(f"v1\n{meta}\n{end}")
    # a/0 has no new data: not an input partition; a/3 is new (read from newPartitions)
    assert kafka_partition_order(str(tmp_path), 1) == ["a/1", "a/2", "a/3", "b/0"]
    assert kafka_partition_order(f"file://{tmp_path}", 1) == ["a/1", "a/2", "a/3", "b/0"]
    with pytest.raises(OffsetLogMismatch, match="no previous offset-log entry"):
        kafka_partition_order(str(tmp_path), 0)
    with pytest.raises(OffsetLogMismatch, match="no offset-log entry"):
        kafka_partition_order(str(tmp_path), 2)
    (log / "2").write_text(f"v1\n{meta}\n{end}\n{end}")
    with pytest.raises(OffsetLogMismatch, match="2 sources"):
        kafka_partition_order(str(tmp_path), 2)
    (log / "3").write_text(f"v1\n{meta}\n{{\"0\": 12}}")
    (log / "4").write_text(f"v1\n{meta}\n{{\"0\": 15}}")
    with pytest.raises(OffsetLogMismatch, match="not an orderedkafka offset"):
        kafka_partition_order(str(tmp_path), 4)


@pytest.mark.cluster
def test_placement_keeps_state_on_its_executor(cluster_spark, patient_locality, kafka, topic,
                                               s3, s3_url, tmp_path) -> None:
    _two_executors(cluster_spark)
    runs: dict[str, list[BatchResult]] = {}
    procs: dict[str, OrderedStateful] = {}
    for mode in ("auto", "off"):
        per_key = BATCHES[mode]
        name = topic(partitions=PARTITIONS, prefix=f"placed-{mode}")
        produced = _produce(kafka, name, 0, per_key)
        checkpoint = str(tmp_path / f"checkpoint-{mode}")
        proc = _processor(name, s3, s3_url, checkpoint, placement=mode)
        results = _run(cluster_spark, kafka, name, proc, checkpoint)
        print(_summary(mode, results))
        assert len(results) == produced // PER_BATCH == per_key
        assert all(len(r.commits) == PARTITIONS for r in results)
        _assert_exactly_once(proc, name, produced, per_key)
        runs[mode], procs[mode] = results, proc

    auto, off = runs["auto"], runs["off"]
    # Batch 0 has no previous offset-log entry: no preference, but its tasks report where they
    # ran. Batch 1 keeps each partition there, except that an executor Spark gave more than
    # its share (ceil(4 / 2) = 2) hands its later partitions to the other one (they restore
    # once). From then on every batch runs exactly where each partition committed last.
    assert auto[0].preferred == {}
    first, second = auto[0].executors, auto[1].preferred
    assert sorted(Counter(second.values()).values()) == [2, 2], second
    for executor in set(first.values()):
        mine = sorted(p for p, e in first.items() if e == executor)
        assert all(second[p] == executor for p in mine[:2]), (first, second)
    assert set(auto[1].restored) == {p for p in first if first[p] != second[p]}
    for before, after in itertools.pairwise(auto):
        assert after.executors == after.preferred, f"batch {after.batch_id} ran elsewhere"
        if after.batch_id >= 2:
            assert after.preferred == before.executors, f"batch {after.batch_id}"
            assert after.restores == 0 and after.bytes_downloaded == 0, _summary("auto", auto)
    # The figure that matters: restores from remote storage over the 20 batches after warm-up.
    measured = auto[WARM_UP:]
    assert len(measured) >= 20
    assert sum(r.restores for r in measured) == 0, _summary("auto", auto)
    assert sum(r.bytes_downloaded for r in measured) == 0, _summary("auto", auto)
    remembered = jvm.Placement(cluster_spark).locations()
    assert {pid: remembered[procs["auto"].placement.key(pid)] for pid in auto[-1].executors} \
        == auto[-1].executors
    assert not any(k.startswith(procs["off"].placement.key("")) for k in remembered)
    # Without placement Spark's scheduler (random resource offers) moves partitions between
    # the two executors; a moved partition restores its state from S3.
    assert all(r.preferred == {} for r in off)
    assert sum(r.restores for r in off[WARM_UP:]) > 0, _summary("off", off)
    assert sum(r.bytes_downloaded for r in off[WARM_UP:]) > 0
    print(f"restores after warm-up: auto {sum(r.restores for r in measured)} in "
          f"{len(measured)} batches, off {sum(r.restores for r in off[WARM_UP:])} in "
          f"{len(off) - WARM_UP} batches")


@pytest.mark.cluster
def test_lost_executor_partitions_restore_once_on_the_survivor(
        cluster_spark, patient_locality, spark_cluster, kafka, topic, s3, s3_url, tmp_path
) -> None:
    """Runs with ``emit=ranges`` (the placement test above uses records): the tasks read
    their ranges from Kafka on whichever executor they are placed, the survivor included."""
    _two_executors(cluster_spark)
    name = topic(partitions=PARTITIONS, prefix="placed-kill")
    checkpoint = str(tmp_path / "checkpoint")
    proc = _processor(name, s3, s3_url, checkpoint)
    produced = _produce(kafka, name, 0, 3)
    warm = _run(cluster_spark, kafka, name, proc, checkpoint, emit="ranges")
    last = warm[-1]
    assert last.restores == 0 and len(last.commits) == PARTITIONS
    workers = {c.partition_id: int(re.search(r"work-(\d+)", c.metrics["cwd"]).group(1))
               for c in last.commits}
    doomed = workers[f"{name}/0"]
    moved = {pid for pid, w in workers.items() if w == doomed}
    survivor = next(c.executor for c in last.commits if workers[c.partition_id] != doomed)

    placement = jvm.Placement(cluster_spark)
    spark_cluster.kill_worker(doomed)
    try:
        wait_until(lambda: len(placement.executors()) == 1, 120,
                   "the driver to notice the killed worker's executor")
        produced += _produce(kafka, name, 3, 4)
        after = _run(cluster_spark, kafka, name, proc, checkpoint, emit="ranges")
    finally:
        spark_cluster.restart_worker(doomed)
        wait_until(lambda: len(placement.executors()) == 2, 180,
                   "the restarted worker's executor to join the application")
    print(_summary("warm", warm), "|", _summary("after kill", after), "| moved", moved)
    assert len(after) >= 2
    first = after[0]
    assert set(first.executors.values()) == {survivor}
    assert set(first.restored) == moved, "each partition of the lost executor restores"
    assert all(c.metrics["reused_local"] for c in first.commits
               if c.partition_id not in moved), "partitions on the survivor reuse their copy"
    assert first.bytes_downloaded > 0
    for result in after[1:]:
        assert set(result.executors.values()) == {survivor}
        assert result.restores == 0 and result.bytes_downloaded == 0
    _assert_exactly_once(proc, name, produced, 7)
