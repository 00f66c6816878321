"""The main job's Python workers: one pool serves the source's reads and the ordered stage (the
main job puts one tiny shuffle between them, so each task needs one worker)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader

from orderedstream.dev.local.jvm import share_python_workers

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
