"""Helpers for the orderedkafka tests: run a stream to completion and collect what it read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa


def stream(spark: Any, bootstrap: str, **options: Any) -> Any:
    """``spark.readStream.format("orderedkafka")`` with ``options`` (keys as Spark spells them)."""
    reader = spark.readStream.format("orderedkafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def run_available_now(df: Any, checkpoint: Path) -> tuple[list[pa.Table], Any]:
    """Run ``df`` with Trigger.AvailableNow; return one Arrow table per batch (with the Spark
    task that read each row and the row's position in that task) and the finished query."""
    batches: list[pa.Table] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        table = batch_df.select(
            "topic", "partition", "offset", "key", "value",
            F.spark_partition_id().alias("task"),
            F.monotonically_increasing_id().alias("pos")).toArrow()
        batches.append(table.append_column("batch", pa.array([batch_id] * table.num_rows,
                                                               pa.int64())))

    query = (df.writeStream.foreachBatch(collect).trigger(availableNow=True)
             .option("checkpointLocation", str(checkpoint)).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return batches, query


def offsets_log(checkpoint: Path) -> list[dict]:
    """The source offsets Spark wrote per batch (the JSON our source returned)."""
    result = []
    files = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    for path in files:
        lines = path.read_text().splitlines()
        result.append(json.loads(lines[2]))
    return result


def keyed(tables: list[pa.Table]) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row read, in the order collected."""
    rows: list[tuple[str, int, int]] = []
    for t in tables:
        rows.extend(zip(t["topic"].to_pylist(), t["partition"].to_pylist(),
                        t["offset"].to_pylist()))
    return rows


def assert_ordered_one_task(tables: list[pa.Table]) -> None:
    """Within each batch every topic-partition came from one Spark task, in offset order."""
    for t in tables:
        seen: dict[tuple[str, int], tuple[int, int, int]] = {}
        for topic, part, off, task, pos in zip(
                t["topic"].to_pylist(), t["partition"].to_pylist(), t["offset"].to_pylist(),
                t["task"].to_pylist(), t["pos"].to_pylist()):
            prev = seen.get((topic, part))
            if prev is not None:
                assert prev[0] == task, f"{topic}-{part} read by tasks {prev[0]} and {task}"
                assert pos > prev[1] and off > prev[2], \
                    f"{topic}-{part}: offset {off} after {prev[2]} out of order"
            seen[(topic, part)] = (task, pos, off)
