"""Spark reads the ordered stage's Delta output: with delta-spark where a release of it supports
this Spark (its jar from Maven Central through ``spark.jars.packages``, cached by Ivy), and on
every release through delta-rs (the committed files, or Arrow into ``createDataFrame``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark import cloudpickle

from orderedstream.sinks.deltalog import DeltaOutput
from tests.compat.test_releases import _exact, _run, _stage, _stream, _twice

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.compat


def _ordered_output(spark: Any, kafka: Any, topic: Any, tmp_path: Path,
                    between: Any = None) -> tuple[str, Any]:
    """Two runs of the ordered stage to a local Delta table; ``between()`` runs between them."""
    url = str(tmp_path / "lake")
    name = topic(partitions=2)
    runs = iter([None, between])

    def run() -> Any:
        after = next(runs)
        if after is not None:
            after()
        stage = _stage(url, {}, tmp_path)
        _run(_stream(spark, kafka, name).writeStream.foreachBatch(stage.process_batch),
             tmp_path / "ckpt")
        return stage

    stage = _twice(kafka, name, 600, run)[-1]
    return f"{url}/out", stage


def test_spark_reads_the_committed_rows_through_delta_rs(spark, kafka, topic, tmp_path) -> None:
    out, stage = _ordered_output(spark, kafka, topic, tmp_path)
    _exact(stage.table().to_arrow(), 600)
    # the committed files only; basePath keeps the partition column of the paths
    files = spark.read.option("basePath", out).parquet(*DeltaTable(out).file_uris())
    assert files.count() == 600 and files.where("violation != 0").count() == 0
    arrow = spark.createDataFrame(DeltaOutput(out).to_arrow())
    assert sorted(arrow.select("partition", "offset").collect()) == sorted(
        files.select("partition", "offset").collect())


def test_delta_spark_reads_and_streams_each_batch_once(delta_spark, kafka, topic,
                                                       tmp_path) -> None:
    spark = delta_spark
    streamed: list[tuple[int, int]] = []

    def downstream() -> None:  # Spark's own Delta stream, one run per run of the stage
        def collect(batch_df: Any, _batch_id: int) -> None:
            streamed.extend((r.partition, r.offset)
                            for r in batch_df.select("partition", "offset").collect())
        _run(spark.readStream.format("delta").load(f"{tmp_path}/lake/out").writeStream
             .foreachBatch(collect), tmp_path / "delta-ckpt")

    out, stage = _ordered_output(spark, kafka, topic, tmp_path, between=downstream)
    downstream()
    committed = stage.table().to_arrow()
    _exact(committed, 600)
    want = sorted(zip(committed["partition"].to_pylist(), committed["offset"].to_pylist()))
    read = spark.read.format("delta").load(out)
    assert sorted((r.partition, r.offset) for r in read.select("partition", "offset").collect()
                  ) == want
    assert sorted(streamed) == want  # every committed row once, none twice
