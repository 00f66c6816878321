"""Run as a user's own script in a plain session (``python`` with ``PYSPARK_SUBMIT_ARGS``, or
``spark-submit`` to a cluster) after the main job: read one batch's state with
``format("rocksstate")`` and copy the job's Kafka topics with ``orderedkafka`` into a
``format("fencedparquet")`` table. Prints one JSON line: the state rows (keys in hex)."""

from __future__ import annotations

import argparse
import json

from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("state", "output", "storage-options", "batch", "bootstrap", "topic-pattern",
                 "parquet", "checkpoint"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    from pyspark_fencedparquet import DefaultSource as FencedParquet
    from pyspark_orderedkafka import DefaultSource as OrderedKafka
    from pyspark_rocksstate import DefaultSource as RocksState

    spark = SparkSession.builder.appName("plain-features").getOrCreate()
    for source in (RocksState, OrderedKafka, FencedParquet):
        spark.dataSource.register(source)
    rows = (spark.read.format("rocksstate").option("path", args.state)
            .option("table", args.output).option("storage_options", args.storage_options)
            .option("batchId", args.batch).load().collect())
    query = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribePattern", args.topic_pattern)
             .option("startingOffsets", "earliest").load()
             .selectExpr("topic", "partition", "offset")
             .writeStream.format("fencedparquet").option("path", args.parquet)
             .option("storageOptions", args.storage_options).option("writerId", "copy")
             .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise SystemExit(f"the fencedparquet copy failed: {error}")
    print(json.dumps([{**r.asDict(), "key": bytes(r.key).hex()} for r in rows]))
    spark.stop()


if __name__ == "__main__":
    main()
