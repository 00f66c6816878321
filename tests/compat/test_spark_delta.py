"""Spark reads the ordered stage's Delta output: with delta-spark where a release of it supports
this Spark (its jar from Maven Central through ``spark.jars.packages``, cached by Ivy), and on
every release through delta-rs (the committed files, or Arrow into ``createDataFrame``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark import cloudpickle

from orderedstream.core.sparkcompat import SPARK_RELEASE
from orderedstream.dev.services.spark import local_spark_session
from orderedstream.sinks.deltalog import DeltaOutput
from tests.compat.test_releases import _exact, _run, _stage, _stream, _twice

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.compat

DELTA_SPARK = {(4, 0): "io.delta:delta-spark_4.0_2.13:4.4.0",
               (4, 1): "io.delta:delta-spark_4.1_2.13:4.4.0",
               (4, 2): "io.delta:delta-spark_4.2_2.13:4.4.0"}
"""Spark release -> the delta-spark build for it on Maven Central (Delta 4.4.0 is built for
Spark 4.0, 4.1 and 4.2, one artifact each; none yet for 4.3)."""
IVY = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orderedstream" / "ivy"
"""Ivy's cache of the delta-spark jars (``spark.jars.ivy``): downloaded once per machine."""


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


@pytest.fixture
def delta_spark(spark_sessions: Any) -> Any:
    package = DELTA_SPARK.get(SPARK_RELEASE)
    if package is None:
        pytest.skip(f"no delta-spark release on Maven Central supports Spark {SPARK_RELEASE}")
    spark_sessions.close_session()
    conf = {"spark.jars.packages": package, "spark.jars.ivy": str(IVY),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            # Delta rebuilds each snapshot in 50 partitions by default: 50 tasks on 2 cores
            "spark.databricks.delta.snapshotPartitions": "2"}
    spark_sessions.session = local_spark_session("orderedstream-delta-spark", conf=conf,
                                                 tmp_dir=spark_sessions.root / "delta")
    spark_sessions.mode = "delta-spark"
    return spark_sessions.session


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
