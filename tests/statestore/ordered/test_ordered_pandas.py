"""The ordered stage's Python workers do not import pandas for the pack's own Arrow work (pyarrow
would, to ask whether a Python list is a pandas object: docs/decisions/0014-no-pandas-import.md),
and a user function that does use pandas still gets pyarrow's full pandas behaviour
(core.pandaslazy)."""

from __future__ import annotations

import collections
import os
import sys
import uuid
from typing import Any

from pyspark import cloudpickle

from orderedstream.python_datasource import OrderedKafkaDataSource
from orderedstream.statestore.ordered import OrderedStateful

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FRESH_POOL = "ORDEREDSTREAM_TEST_WORKER_POOL"
RECORDS, PER_BATCH = 40, 10  # one Kafka partition: batches of offsets 0-9, 10-19, 20-29, 30-39


def report_imports(key: Any, record: Any, state: Any) -> Any:
    return [(key.decode(), record["offset"], os.getpid(), "pandas" in sys.modules)]


def use_pandas(key: Any, record: Any, state: Any) -> Any:
    import pandas as pd
    import pyarrow as pa

    # pyarrow sees pandas once the user imports it: NaN of a pandas Series is a null, a
    # DataFrame is a table, to_pandas works, and pandas scalars convert.
    nulls = pa.array(pd.Series([1.0, float("nan")])).null_count
    frame = pa.table(pd.DataFrame({"offset": [record["offset"]]})).to_pandas()
    stamp = pd.Timestamp(1_700_000_000 + record["offset"], unit="s")
    return [(key.decode(), int(frame["offset"].iloc[0]), nulls, stamp, pd.Series([2, 3]).sum())]


def _run(spark: Any, kafka: Any, topic: Any, s3: Any, s3_url: str, tmp_path: Any, func: Any,
         schema: str, emit: str) -> Any:
    spark.dataSource.register(OrderedKafkaDataSource)
    name = topic(partitions=1)
    assert kafka.produce(name, [(f"k{i % 3}".encode(), b"v") for i in range(RECORDS)]) == RECORDS
    proc = OrderedStateful(func, state_location=f"{s3_url}/state", output=f"{s3_url}/out",
                           output_schema=schema, storage_options=s3.storage_options,
                           store_options={"local_dir": str(tmp_path / "local")})
    frame = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
             .option("startingOffsets", "earliest").option("emit", emit)
             .option("maxOffsetsPerTrigger", str(PER_BATCH)).load())
    query = (frame.writeStream.foreachBatch(proc.process_batch)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return proc.table().to_arrow().to_pylist()


def test_the_stage_builds_its_arrow_output_without_importing_pandas(
        spark, kafka, topic, s3, s3_url, tmp_path) -> None:
    # Workers of this test only: Spark pools Python workers by their environment, and a
    # worker an earlier test of this session reused may have imported pandas for its own
    # functions (a flaky pass or failure that says nothing about the stage).
    environment = spark.sparkContext.environment
    environment[FRESH_POOL] = uuid.uuid4().hex
    try:
        rows = _run(spark, kafka, topic, s3, s3_url, tmp_path, report_imports,
                    "key string, offset long, pid long, pandas boolean", "ranges")
    finally:
        environment.pop(FRESH_POOL, None)
    assert sorted(r["offset"] for r in rows) == list(range(RECORDS))
    batches_by_pid = collections.defaultdict(set)
    for r in rows:
        batches_by_pid[r["pid"]].add(r["offset"] // PER_BATCH)
    # A worker that ran a later batch had built the Arrow output of an earlier one (and read
    # its Kafka range into Arrow) before the user function looked at sys.modules.
    assert max(len(b) for b in batches_by_pid.values()) >= 2, batches_by_pid
    assert [r for r in rows if r["pandas"]] == []


def test_a_user_function_using_pandas_gets_pyarrows_pandas_behaviour(
        spark, kafka, topic, s3, s3_url, tmp_path) -> None:
    rows = _run(spark, kafka, topic, s3, s3_url, tmp_path, use_pandas,
                "key string, offset long, nulls long, stamp timestamp, total long", "records")
    assert sorted(r["offset"] for r in rows) == list(range(RECORDS))
    assert {r["nulls"] for r in rows} == {1}
    assert {r["total"] for r in rows} == {5}
    assert sorted(int(r["stamp"].timestamp()) for r in rows) == [
        1_700_000_000 + o for o in range(RECORDS)]
