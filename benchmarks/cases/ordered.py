"""Ordered stateful processing vs Spark's ``groupBy().applyInPandasWithState`` (RocksDB state).

Usage::

    .venv/bin/python -m benchmarks.cases.ordered --records 1000000 --partitions 4 --keys 20000

Expected output (one line per engine, then the ratio)::

    ordered                  1000000 records in 30.1 s = 33,200 records/s, order violations 0
    applyInPandasWithState   1000000 records in 95.0 s = 10,500 records/s, order violations 0
    ordered / applyInPandasWithState = 3.16

Both read the same topic through ``orderedkafka`` in one ``Trigger.AvailableNow`` streaming
query and run the same logic: per key, values are 0, 1, 2, ... in production order; the state is
the last value seen and every record whose value is not last + 1 counts as an order violation.
Output rows go to Parquet in both. State and output live on the local filesystem in both, so
the comparison is about the processing path (narrow ordered stage vs shuffle + grouped state).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def check_order(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    seq = int(record["value"])
    previous = state.get_option(-1)
    state.update(seq)
    return [(key, record["partition"], record["offset"], seq, 0 if seq == previous + 1 else 1)]


def check_order_pandas(key: Any, frames: Any, state: Any) -> Any:
    import pandas as pd

    previous = state.get[0] if state.exists else -1
    for frame in frames:
        seqs = frame["value"].map(lambda v: int(v)).tolist()
        violations = []
        for seq in seqs:
            violations.append(0 if seq == previous + 1 else 1)
            previous = seq
        yield pd.DataFrame({"key": frame["key"], "partition": frame["partition"],
                            "offset": frame["offset"], "seq": seqs, "violation": violations})
    state.update((previous,))


def produce(bootstrap: str, topic: str, records: int, partitions: int, keys: int) -> None:
    """``records`` records over ``keys`` keys; each key's values are 0, 1, 2, ... in order."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep it alive until the result
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % (i % keys), value=b"%d" % (i // keys))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(300):
        raise RuntimeError("benchmark data was not fully delivered")


def measure(bootstrap: str, topic: str, records: int, partitions: int, work: Path,
            only: str | None = None) -> dict[str, dict[str, float]]:
    """Run both engines over ``topic``; returns engine -> {records_per_s, violations, seconds}."""
    from pyspark import cloudpickle

    from orderedstream.services.spark import local_spark_session
    from statestore.ordered import OrderedStateful

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark = local_spark_session("ordered-bench", tmp_dir=work / "spark", conf={
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.shuffle.partitions": str(partitions)})

    def source() -> Any:
        return (spark.readStream.format("orderedkafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest").load())

    schema = "key binary, partition int, offset long, seq long, violation int"
    results: dict[str, dict[str, float]] = {}
    try:
        if only in (None, "ordered"):
            proc = OrderedStateful(check_order, state_location=f"file://{work}/ordered-state",
                                   output=f"file://{work}/ordered-out", output_schema=schema)
            started = time.perf_counter()
            query = (source().writeStream.foreachBatch(proc.process_batch)
                     .option("checkpointLocation", str(work / "cp-ordered"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            seconds = time.perf_counter() - started
            out = proc.table().to_arrow()
            assert out.num_rows == records, out.num_rows
            results["ordered"] = {"records_per_s": records / seconds, "seconds": seconds,
                                  "violations": sum(out["violation"].to_pylist())}
        if only in (None, "pandas"):
            started = time.perf_counter()
            query = (source().groupBy("key").applyInPandasWithState(
                check_order_pandas, schema, "last long", "append", "NoTimeout")
                .writeStream.format("parquet").option("path", str(work / "pandas-out"))
                .option("checkpointLocation", str(work / "cp-pandas"))
                .trigger(availableNow=True).start())
            query.awaitTermination()
            seconds = time.perf_counter() - started
            out = spark.read.parquet(str(work / "pandas-out"))
            rows = out.count()
            assert rows == records, rows
            results["pandas"] = {"records_per_s": records / seconds, "seconds": seconds,
                                 "violations": out.selectExpr("sum(violation)").collect()[0][0]}
    finally:
        spark.stop()
    return results


def run(ctx: Any) -> list[Any]:
    """benchmarks.run case: same topic, same logic, both engines, one process."""
    from benchmarks.common import Result

    records, partitions = ctx.scale["records"], ctx.scale["partitions"]
    keys = max(10, records // 50)
    topic = f"bench-ordered-{int(time.time())}"
    produce(ctx.bootstrap, topic, records, partitions, keys)
    work = Path(tempfile.mkdtemp(prefix="ordered-", dir=ctx.workdir))
    res = measure(ctx.bootstrap, topic, records, partitions, work)
    how = (f"{records:,} records over {partitions} partitions and {keys:,} keys, orderedkafka "
           "AvailableNow in both, same per-key logic, Parquet output and state on local disk, "
           "Spark's RocksDB state store provider for applyInPandasWithState, local[2]")
    return [
        Result("ordered state", "records/s", "records/s", res["ordered"]["records_per_s"],
               res["pandas"]["records_per_s"], "groupBy().applyInPandasWithState", how,
               extra={k: round(v["seconds"], 1) for k, v in res.items()}),
        Result("ordered state", "order violations", "records", res["ordered"]["violations"],
               res["pandas"]["violations"], "groupBy().applyInPandasWithState",
               "records whose per-key value was not last + 1 (must be 0)",
               higher_is_better=False),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--only", choices=("ordered", "pandas"), default=None)
    args = parser.parse_args()

    from orderedstream.services.kafka import KafkaBroker

    work = Path(tempfile.mkdtemp(prefix="ordered-bench-"))
    broker = KafkaBroker(work / "kafka").start()
    try:
        produce(broker.bootstrap, "bench", args.records, args.partitions, args.keys)
        results = measure(broker.bootstrap, "bench", args.records, args.partitions, work,
                          args.only)
    finally:
        broker.kill()
    for name, r in results.items():
        print(f"{name:10s} {args.records} records in {r['seconds']:5.1f} s = "
              f"{r['records_per_s']:,.0f} records/s, order violations {r['violations']}")
    if len(results) == 2:
        print(f"ordered / applyInPandasWithState = "
              f"{results['ordered']['records_per_s'] / results['pandas']['records_per_s']:.2f}")


if __name__ == "__main__":
    main()
