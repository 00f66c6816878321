"""The compatibility part's Spark session: where a delta-spark release supports this Spark,
one local session with delta-spark on it serves every case (Spark's own Delta reader is then
tested in the same session as the pack), so the lane starts one Spark per release."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orderedstream.core.sparkcompat import SPARK_RELEASE
from orderedstream.dev.services.spark import local_spark_session

DELTA_SPARK = {(4, 0): "io.delta:delta-spark_4.0_2.13:4.4.0",
               (4, 1): "io.delta:delta-spark_4.1_2.13:4.4.0",
               (4, 2): "io.delta:delta-spark_4.2_2.13:4.4.0"}
"""Spark release -> the delta-spark build for it on Maven Central (Delta 4.4.0 is built for
Spark 4.0, 4.1 and 4.2, one artifact each; none yet for 4.3)."""
IVY = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orderedstream" / "ivy"
"""Ivy's cache of the delta-spark jars (``spark.jars.ivy``): downloaded once per machine."""


def delta_spark_session(spark_sessions: Any) -> Any:
    """The local session with delta-spark (started once; replaces the plain local one)."""
    package = DELTA_SPARK.get(SPARK_RELEASE)
    if package is None:
        pytest.skip(f"no delta-spark release on Maven Central supports Spark {SPARK_RELEASE}")
    if spark_sessions.mode == "delta-spark" and spark_sessions.session is not None:
        return spark_sessions.session
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


@pytest.fixture
def spark(spark_sessions: Any) -> Any:
    """The delta-spark session where delta-spark supports this release, else the local one."""
    if SPARK_RELEASE in DELTA_SPARK:
        return delta_spark_session(spark_sessions)
    return spark_sessions.get("local")


@pytest.fixture
def delta_spark(spark_sessions: Any) -> Any:
    """The local session with delta-spark; skips where no delta-spark supports this Spark."""
    return delta_spark_session(spark_sessions)
