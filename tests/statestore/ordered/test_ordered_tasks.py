"""With ``emit=ranges`` a batch's ranges share at most ``max_tasks`` tasks (default: Spark's
default parallelism), each range still read and processed whole, in offset order."""

from __future__ import annotations

import sys
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from orderedstream.core.errors import OptionError
from orderedstream.statestore.ordered import OrderedStateful
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.unit
@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_max_tasks_is_checked(tmp_path: Any, bad: Any) -> None:
    with pytest.raises(OptionError, match="max_tasks"):
        OrderedStateful(check_order, state_location=f"file://{tmp_path}/s",
                        output=f"file://{tmp_path}/o", output_schema=ORDER_SCHEMA,
                        max_tasks=bad)


@pytest.mark.parametrize("max_tasks,tasks", [(None, 2), (0, 6), (1, 1)])
def test_ranges_share_tasks_up_to_max_tasks(spark, kafka, topic, s3, s3_url, tmp_path,
                                            max_tasks: int | None, tasks: int) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    name = topic(partitions=6)
    keys, per_key = 60, 10
    records = [(f"k{i % keys}".encode(), str(i // keys).encode()) for i in range(keys * per_key)]
    assert kafka.produce(name, records) == len(records)
    proc = OrderedStateful(check_order, state_location=f"{s3_url}/state", output=f"{s3_url}/out",
                           output_schema=ORDER_SCHEMA, storage_options=s3.storage_options,
                           store_options={"local_dir": str(tmp_path / "local")},
                           max_tasks=max_tasks)
    frame = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
             .option("startingOffsets", "earliest").option("emit", "ranges").load())
    results = []

    def each(df: Any, batch_id: int) -> None:
        results.append(proc.process_batch(df, batch_id))

    query = (frame.writeStream.foreachBatch(each)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    (result,) = [r for r in results if r.records]
    assert len(result.commits) == 6 and result.records == len(records)
    assert len({c.task_attempt for c in result.commits}) == tasks
    assert proc.records_total == len(records)
    out = proc.table().to_arrow()
    assert out.num_rows == len(records) and pc.sum(out["violation"]).as_py() == 0
