"""The main job's Python workers: one pool serves the source's reads and the ordered stage, and
the stage gets the batch's ranges as a local DataFrame holding the rows the source planned."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader

from orderedstream.core.jvm import share_python_workers
from orderedstream.python_datasource.ranges import RANGE_COLUMNS, materialized
from tests.fixtures import unique

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _DaemonReader(DataSourceReader):
    def read(self, partition: Any) -> Iterator[tuple[int]]:
        yield (os.getppid(),)  # the daemon that forked this worker


class _DaemonSource(DataSource):
    """One row: the pid of the daemon whose worker read it."""

    @classmethod
    def name(cls) -> str:
        return "orderedstream_test_daemon"

    def schema(self) -> str:
        return "daemon long"

    def reader(self, schema: Any) -> DataSourceReader:
        return _DaemonReader()


def _daemons(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield pa.RecordBatch.from_pydict({"daemon": [os.getppid()] * batch.num_rows})


def test_data_source_reads_and_map_in_arrow_share_one_worker_pool(spark: Any) -> None:
    assert share_python_workers(spark)  # local mode
    spark.dataSource.register(_DaemonSource)
    source = {r.daemon for r in spark.read.format("orderedstream_test_daemon").load().collect()}
    stage = {r.daemon for r in spark.range(4).mapInArrow(_daemons, "daemon long").collect()}
    assert len(source) == 1 and stage == source
    # a function with an environment of its own still gets a pool of its own
    env = spark.sparkContext.environment
    env["ORDEREDSTREAM_TEST_OWN_POOL"] = "1"
    try:
        own = {r.daemon for r in spark.range(2).mapInArrow(_daemons, "daemon long").collect()}
    finally:
        del env["ORDEREDSTREAM_TEST_OWN_POOL"]
    assert own.isdisjoint(source)


def test_materialized_ranges_are_the_planned_rows_without_a_source_scan(spark: Any,
                                                                         kafka: Any) -> None:
    topic = unique("workers-ranges")
    kafka.create_topic(topic, 3)
    for partition, count in enumerate((5, 0, 7)):
        kafka.produce(topic, [(f"k{i}", f"v{i}") for i in range(count)], partition=partition)
    ranges = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", topic).option("emit", "ranges").load())
    local = materialized(ranges)
    assert tuple(local.columns) == RANGE_COLUMNS
    assert local.schema == ranges.schema
    assert sorted(local.collect()) == sorted(ranges.collect())
    assert sorted((r.partition, r.startOffset, r.endOffset) for r in local.collect()) == \
        [(0, 0, 5), (2, 0, 7)]
    plan = local._jdf.queryExecution().executedPlan().toString()
    assert "LocalTableScan" in plan and "BatchEvalPython" not in plan and "Python" not in plan, plan
