"""The JVM archive's training workload (``jvmarchive``): the kinds of work the main job's
driver JVM does (a Python Data Source stream read in Trigger.AvailableNow batches, coalesce,
``mapInArrow``, ``observe``, ``foreachBatch`` with a collect, SQL aggregation), so the archive
holds the classes a job's start loads. No Kafka or S3: nothing outside this process is used."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from orderedstream.core.sparkcompat import ReadAllAvailable, ReadLimit, SupportsTriggerAvailableNow

TICKS = 4


class Ticks(DataSource):
    """``format("orderedstream_cds_ticks")``: ``TICKS`` numbered rows, one per partition."""

    @classmethod
    def name(cls) -> str:
        return "orderedstream_cds_ticks"

    def schema(self) -> str:
        return "n long, topic string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return TickReader()


class TickReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        return None

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        # Spark 4.2+ passes the start and the limit; 4.0 and 4.1 call latestOffset() alone.
        return {"n": TICKS}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(i) for i in range(start["n"], end["n"])]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, str]]:
        yield (partition.value, f"t{partition.value % 2}")

    def commit(self, end: dict) -> None:
        return None


def _same(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def run_training(spark: Any, work: Path) -> None:
    """One AvailableNow stream through the stages the job uses, then a batch aggregation."""
    from pyspark.sql import functions as F

    spark.dataSource.register(Ticks)
    frame = (spark.readStream.format(Ticks.name()).load().coalesce(2)
             .mapInArrow(_same, "n long, topic string")
             .observe("training", F.count(F.lit(1)).alias("rows")))

    def each_batch(batch: Any, batch_id: int) -> None:
        batch.groupBy("topic").agg(F.max("n")).collect()

    query = (frame.writeStream.foreachBatch(each_batch)
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    spark.range(1000).selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
