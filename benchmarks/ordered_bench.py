"""Ordered stateful processing vs Spark's ``groupBy().applyInPandasWithState`` (RocksDB state).

Usage::

    .venv/bin/python benchmarks/ordered_bench.py --records 1000000 --partitions 4 --keys 20000

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--only", choices=("ordered", "pandas"), default=None)
    args = parser.parse_args()

    from pyspark import cloudpickle

    from orderedstream.services.kafka import KafkaBroker
    from orderedstream.services.spark import local_spark_session
    from python_datasource.source import OrderedKafkaDataSource
    from statestore.ordered import OrderedStateful

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    work = Path(tempfile.mkdtemp(prefix="ordered-bench-"))
    broker = KafkaBroker(work / "kafka").start()
    try:
        broker.create_topic("bench", args.partitions)
        producer = broker.producer(linger_ms=50, batch_num_messages=10000)
        for i in range(args.records):
            while True:
                try:
                    producer.produce("bench", key=b"k%d" % (i % args.keys),
                                     value=b"%d" % (i // args.keys))
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(300) == 0
        spark = local_spark_session("ordered-bench", tmp_dir=work / "spark", conf={
            "spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "spark.sql.shuffle.partitions": str(args.partitions)})
        spark.dataSource.register(OrderedKafkaDataSource)

        def source() -> Any:
            return (spark.readStream.format("orderedkafka")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", "bench").option("startingOffsets", "earliest").load())

        schema = "key binary, partition int, offset long, seq long, violation int"
        results: dict[str, float] = {}
        if args.only in (None, "ordered"):
            proc = OrderedStateful(check_order, state_location=f"file://{work}/ordered-state",
                                   output=f"file://{work}/ordered-out", output_schema=schema)
            started = time.perf_counter()
            query = (source().writeStream.foreachBatch(proc.process_batch)
                     .option("checkpointLocation", str(work / "cp-ordered"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            seconds = time.perf_counter() - started
            out = proc.table().to_arrow()
            assert out.num_rows == args.records, out.num_rows
            violations = sum(out["violation"].to_pylist())
            results["ordered"] = args.records / seconds
            result = proc.last_result
            if result is not None and result.commits:
                stages = {k: round(sum(c.metrics[k] for c in result.commits), 2)
                          for k in ("open_s", "process_s", "commit_s")}
                print(f"ordered task time (sum over {len(result.commits)} partitions of the "
                      f"last batch): {stages}", flush=True)
            print(f"{'ordered':24s} {args.records} records in {seconds:5.1f} s = "
                  f"{results['ordered']:,.0f} records/s, order violations {violations}",
                  flush=True)
        if args.only in (None, "pandas"):
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
            assert rows == args.records, rows
            violations = out.selectExpr("sum(violation)").collect()[0][0]
            results["pandas"] = args.records / seconds
            print(f"{'applyInPandasWithState':24s} {args.records} records in {seconds:5.1f} s "
                  f"= {results['pandas']:,.0f} records/s, order violations {violations}",
                  flush=True)
        if len(results) == 2:
            print(f"ordered / applyInPandasWithState = "
                  f"{results['ordered'] / results['pandas']:.2f}")
        spark.stop()
    finally:
        broker.kill()


if __name__ == "__main__":
    main()
