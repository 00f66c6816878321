"""Test-only pieces for the placement tests: a tiny Python streaming source and a stage.

Both are built inside functions so cloudpickle ships them by value: executors cannot import
modules from tests/.
"""

from __future__ import annotations

from typing import Any


def register_batches_source(spark: Any) -> str:
    """Register ``shimbatches``: a Python streaming source with ``partitions`` input partitions
    per micro-batch, one micro-batch per trigger, ``batches`` of them. Like the orderedkafka
    source, its partitions carry no preferred locations. Returns the format name."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class BatchPartition(InputPartition):
        def __init__(self, index: int, batch: int) -> None:
            self.index = index
            self.batch = batch

    class BatchesReader(DataSourceStreamReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.partitions_per_batch = int(options.get("partitions", "4"))
            self.batches = int(options.get("batches", "5"))

        def initialOffset(self) -> dict:
            return {"batch": 0}

        def latestOffset(self, start: dict, limit: Any) -> dict:
            return {"batch": min(int(start["batch"]) + 1, self.batches)}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [BatchPartition(i, int(start["batch"]))
                    for i in range(self.partitions_per_batch)]

        def read(self, partition: BatchPartition):  # type: ignore[override]
            for row in range(10):
                yield (partition.index, partition.batch, row)

        def commit(self, end: dict) -> None:
            pass

    class BatchesSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "shimbatches"

        def schema(self) -> str:
            return "partition int, batch int, row int"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return BatchesReader(dict(self.options))

    spark.dataSource.register(BatchesSource)
    return "shimbatches"


def executor_stage() -> Any:
    """A mapInArrow function: one row per task with its input partition, the executor it ran on
    (``shim.task_executor_id()``) and how many rows it saw, in order."""

    def stage(batches):  # type: ignore[no-untyped-def]
        import pyarrow as pa
        from pyspark import TaskContext

        from orderedstream.core.jvm import task_executor_id

        rows = 0
        for batch in batches:
            rows += batch.num_rows
        yield pa.RecordBatch.from_pydict({
            "partition": pa.array([TaskContext.get().partitionId()], pa.int32()),
            "executor": pa.array([task_executor_id() or ""], pa.string()),
            "rows": pa.array([rows], pa.int64()),
        })

    return stage


STAGE_SCHEMA = "partition int, executor string, rows long"
