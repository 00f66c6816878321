"""Executor-sticky placement of the ordered stage: per-batch time and state bytes downloaded,
with ``placement="auto"`` (the JVM shim) and ``"off"`` (Spark's own placement), standalone.

Starts its own Kafka, SeaweedFS S3 and a Spark standalone cluster (2 workers x 1 core), loads
``--state-mb`` MB of state into each of 4 Kafka partitions (one big batch), then runs
``--batches`` small micro-batches (Trigger.AvailableNow, ``maxOffsetsPerTrigger``) and reports,
per mode, the median foreachBatch time, restores and bytes downloaded per batch.

Usage::

    .venv/bin/python benchmarks/placement_bench.py --state-mb 50 --batches 8

``spark.locality.wait`` is 60 s here (see the test ``patient_locality`` fixture: with both
executors on one host, a task queued behind a slow one would otherwise run on the other
executor after 3 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARTITIONS = 4
VALUE_BYTES = 1024


def keep_latest(key: Any, record: Any, state: Any) -> list[tuple[Any, int]]:
    """State per key: the latest value (VALUE_BYTES of incompressible bytes)."""
    state.update(record["value"])
    return [(key, len(record["value"]))]


def _produce(kafka: Any, topic: str, keys_per_partition: int, rounds: int, seed: int) -> int:
    producer = kafka.producer(linger_ms=50, batch_num_messages=10000)
    count = 0
    for r in range(rounds):
        for k in range(keys_per_partition):
            for p in range(PARTITIONS):
                producer.produce(topic, key=f"p{p}-k{k}".encode(),
                                 value=os.urandom(VALUE_BYTES), partition=p)
                count += 1
                if count % 50_000 == 0:
                    producer.flush(120)
        del r
    assert producer.flush(300) == 0
    return count


def _run(spark: Any, kafka: Any, topic: str, proc: Any, checkpoint: str,
         max_offsets: int | None) -> list[tuple[Any, float]]:
    results: list[tuple[Any, float]] = []

    def on_batch(batch_df: Any, batch_id: int) -> None:
        started = time.perf_counter()
        result = proc.process_batch(batch_df, batch_id)
        results.append((result, time.perf_counter() - started))

    reader = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    query = (reader.load().writeStream.foreachBatch(on_batch).trigger(availableNow=True)
             .option("checkpointLocation", checkpoint).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-mb", type=int, default=50, help="state per Kafka partition")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--per-batch", type=int, default=400, help="records per small batch")
    args = parser.parse_args()

    from pyspark import cloudpickle

    from orderedstream import shim
    from orderedstream.services.kafka import KafkaBroker
    from orderedstream.services.process import wait_until
    from orderedstream.services.s3 import S3Server
    from orderedstream.services.spark import SparkStandaloneCluster
    from statestore.ordered import OrderedStateful

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    shim.build(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="placement-bench-"))
    kafka = KafkaBroker(work / "kafka").start()
    s3 = S3Server(work / "s3").start()
    cluster = SparkStandaloneCluster(work / "cluster").start()
    try:
        spark = cluster.session("placement-bench", conf={"spark.locality.wait": "60s"})
        wait_until(lambda: len(shim.Placement(spark).executors()) == 2, 180, "2 executors")
        topic = "placement-bench"
        kafka.create_topic(topic, PARTITIONS)
        keys = args.state_mb * (1 << 20) // VALUE_BYTES
        t0 = time.perf_counter()
        loaded = _produce(kafka, topic, keys, 1, 0)
        print(f"produced {loaded:,} records ({args.state_mb} MB state per partition) in "
              f"{time.perf_counter() - t0:.0f}s", flush=True)
        procs = {}
        for mode in ("auto", "off"):
            base = s3.url(f"bench/{mode}")
            procs[mode] = OrderedStateful(
                keep_latest, state_location=f"{base}/state", output=f"{base}/out",
                output_schema="key binary, n long", storage_options=s3.storage_options,
                checkpoint_location=str(work / f"checkpoint-{mode}"), placement=mode)
            t0 = time.perf_counter()
            _run(spark, kafka, topic, procs[mode], str(work / f"checkpoint-{mode}"), None)
            print(f"{mode}: initial load in {time.perf_counter() - t0:.0f}s", flush=True)
        small_keys = max(1, args.per_batch // PARTITIONS)
        _produce(kafka, topic, small_keys, args.batches, 1)
        print(f"{'mode':<6} {'batches':>7} {'p50 s/batch':>12} {'mean s/batch':>13} "
              f"{'restores':>9} {'MB downloaded':>14}")
        for mode in ("auto", "off"):
            results = _run(spark, kafka, topic, procs[mode], str(work / f"checkpoint-{mode}"),
                           args.per_batch)
            times = [t for _, t in results]
            restores = sum(r.restores for r, _ in results)
            downloaded = sum(r.bytes_downloaded for r, _ in results) / (1 << 20)
            print(f"{mode:<6} {len(results):>7} {statistics.median(times):>12.2f} "
                  f"{statistics.mean(times):>13.2f} {restores:>9} {downloaded:>14.1f}",
                  flush=True)
            for r, t in results:
                print(f"    batch {r.batch_id}: {t:.2f}s restored {list(r.restored)} "
                      f"{r.bytes_downloaded / (1 << 20):.1f} MB", flush=True)
        spark.stop()
    finally:
        cluster.stop()
        s3.kill()
        kafka.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
