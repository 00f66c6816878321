"""Placement on a local session (the driver is the one executor), and without the jar."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orderedstream.core.errors import PlacementError
from orderedstream.core.jvm import Placement
from tests.shim.shim_helpers import STAGE_SCHEMA, executor_stage


def test_prefer_keeps_rows_and_partitions(spark: Any, shim_jar: Path) -> None:
    placement = Placement(spark)
    assert placement.available, "the session started without the shim jar on spark.jars"
    assert placement.version() == shim_jar.stem.removeprefix("orderedstream-shim-")
    df = spark.range(0, 1000, numPartitions=3).selectExpr("id", "id * 2 AS twice")
    placed = placement.prefer(df, {0: "k-0", 1: "k-1", 2: "k-2"}, tag="local:0")
    assert placed.rdd.getNumPartitions() == 3
    assert placed.schema == df.schema
    assert sorted(placed.collect()) == sorted(df.collect())
    assert placement.planned("local:0") == {0: "driver", 1: "driver", 2: "driver"}


def test_tasks_know_their_executor_and_commit_remembers_it(spark: Any, shim_jar: Path) -> None:
    placement = Placement(spark)
    placement.forget("local-commit:")
    df = spark.range(0, 300, numPartitions=3)
    keys = {0: "local-commit:a", 1: "local-commit:b", 2: "local-commit:c"}
    placed = placement.prefer(df, keys, tag="local-commit:0")
    rows = placed.mapInArrow(executor_stage(), STAGE_SCHEMA).collect()
    assert sorted((r.partition, r.executor, r.rows) for r in rows) == [
        (0, "driver", 100), (1, "driver", 100), (2, "driver", 100)]
    assert placement.observed("local-commit:0") == {0: "driver", 1: "driver", 2: "driver"}
    learned = placement.commit("local-commit:0")
    assert learned == {"local-commit:a": "driver", "local-commit:b": "driver",
                       "local-commit:c": "driver"}
    assert {k: v for k, v in placement.locations().items()
            if k.startswith("local-commit:")} == learned
    assert placement.commit("local-commit:0") == {}, "a tag is committed once"
    placement.commit_locations({"local-commit:a": "7"})
    assert placement.locations()["local-commit:a"] == "7"
    placement.forget("local-commit:")
    assert not any(k.startswith("local-commit:") for k in placement.locations())


def test_bad_requests_name_what_is_wrong(spark: Any, shim_jar: Path) -> None:
    placement = Placement(spark)
    df = spark.range(0, 10, numPartitions=2)
    with pytest.raises(PlacementError, match=r"partition index 5 .*has 2 partitions"):
        placement.prefer(df, {5: "k"}, tag="bad:0")
    with pytest.raises(PlacementError, match=r"partition index -1"):
        placement.prefer(df, {-1: "k"}, tag="bad:1")
    with pytest.raises(PlacementError, match=r"non-empty strings"):
        placement.prefer(df, {0: ""}, tag="bad:2")
    with pytest.raises(PlacementError, match=r"tag must be a non-empty string"):
        placement.prefer(df, {0: "k"}, tag="")


_WITHOUT_JAR = textwrap.dedent("""
    import logging, sys
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("orderedstream.core.jvm").addHandler(Keep())
    from pyspark.sql import SparkSession
    from orderedstream.core.jvm import Placement
    # A session made outside the pack (no default_conf), so no shim jar on spark.jars.
    spark = (SparkSession.builder.master("local[1]").appName("no-shim")
             .config("spark.ui.enabled", "false").config("spark.local.dir", sys.argv[1])
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    assert "orderedstream-shim" not in spark.sparkContext.getConf().get("spark.jars", "")
    try:
        df = spark.range(0, 100, numPartitions=2)
        first, second = Placement(spark), Placement(spark)
        assert not first.available and not second.available
        assert first.prefer(df, {0: "a", 1: "b"}, tag="t:0") is df
        assert first.commit("t:0") == {} and first.executors() == {}
        assert df.count() == 100
        warned = [r for r in records if "JVM shim not on the classpath" in r]
        print("WARNINGS", len(warned))
    finally:
        spark.stop()
""")


def test_without_the_jar_everything_works_and_it_is_logged_once(tmp_path: Path) -> None:
    """A separate driver process whose session has no shim jar (one JVM per process)."""
    result = subprocess.run([sys.executable, "-c", _WITHOUT_JAR, str(tmp_path)],
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "WARNINGS 1" in result.stdout, result.stdout[-2000:]
