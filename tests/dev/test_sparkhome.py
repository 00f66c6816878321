"""The local sessions' Spark home: pyspark's folder by links without ``pyspark.zip``, so the
Python processes Spark starts (Data Source planners, workers) import the installed, compiled
pyspark; left alone for cluster masters and for a user's own ``SPARK_HOME``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from orderedstream.dev.services import sparkhome


class WhereIsPyspark(DataSource):
    """One row per process kind: where ``pyspark`` was imported from."""

    @classmethod
    def name(cls) -> str:
        return "where_is_pyspark"

    def schema(self) -> str:
        return "process string, pyspark string"

    def reader(self, schema: Any) -> DataSourceReader:
        return WhereReader()


class WhereReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:  # runs in Spark's planner process
        import pyspark

        return [InputPartition(pyspark.__file__)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, str]]:
        import pyspark

        yield ("planner", partition.value)
        yield ("worker", pyspark.__file__)


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_the_home_mirrors_pyspark_without_its_zip() -> None:
    real = sparkhome.installed_home()
    home = sparkhome.for_session("local[2]")
    assert home is not None and home.parent == sparkhome.cache_root()
    assert (real / sparkhome.ZIP).is_file() and not (home / sparkhome.ZIP).exists()
    assert (home / "bin" / "spark-submit").resolve() == (real / "bin" / "spark-submit").resolve()
    kept = sorted(n for n in os.listdir(real / "jars") if not n.startswith(sparkhome.LEFT_OUT))
    assert sorted(os.listdir(home / "jars")) == kept
    assert any(n.startswith("spark-sql_") for n in kept)
    assert any(n.startswith("spark-mllib_") for n in os.listdir(real / "jars"))
    assert not any(n.startswith(("spark-mllib_", "spark-hive_")) for n in kept)
    assert all((home / "jars" / n).resolve() == (real / "jars" / n).resolve() for n in kept)
    assert sparkhome.for_session("local") == home  # created once
    assert sparkhome.for_session("spark://127.0.0.1:7077") is None  # executors elsewhere


def test_a_stale_home_without_its_jars_is_rebuilt(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORDEREDSTREAM_CACHE", str(tmp_path))  # not the home other runs use
    monkeypatch.delenv("SPARK_HOME", raising=False)
    home = sparkhome.for_session("local[2]")
    assert home is not None and home.parent == tmp_path / "spark-home"
    victim = next(home.glob("jars/spark-core_*.jar"))
    victim.unlink()  # an interrupted build or a removed link: incomplete, so built again
    assert sparkhome.for_session("local[2]") == home
    assert victim.is_symlink() and victim.resolve().is_file()


def test_making_a_home_removes_those_of_deleted_installs(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORDEREDSTREAM_CACHE", str(tmp_path))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    root = tmp_path / "spark-home"
    gone_install, other_install = tmp_path / "deleted-venv-pyspark", tmp_path / "other-pyspark"
    (other_install / "bin").mkdir(parents=True)
    gone = root / "pyspark-4.0.0-aaaaaaaaaaaa"  # its install's folder was deleted with a clone
    other = root / "pyspark-4.0.0-bbbbbbbbbbbb"  # another install that still exists: kept
    for home, install in ((gone, gone_install), (other, other_install)):
        home.mkdir(parents=True)
        (home / "bin").symlink_to(install / "bin")
    old_draft, new_draft = root / ".pyspark-4.0.0-cccc.x1", root / ".pyspark-4.0.0-dddd.x2"
    old_draft.mkdir()
    new_draft.mkdir()  # maybe another process building a home right now: kept
    hour_ago = time.time() - sparkhome.DRAFT_AGE_S - 60
    os.utime(old_draft, (hour_ago, hour_ago))
    home = sparkhome.for_session("local[2]")
    assert home is not None and home.is_dir()
    assert not gone.exists() and not old_draft.exists()
    assert other.is_dir() and new_draft.is_dir()
    assert sorted(p.name for p in root.iterdir()) == sorted([home.name, other.name,
                                                             new_draft.name])
    assert sparkhome.prune(keep=home) == []  # nothing more to remove


def test_the_local_sessions_class_path_leaves_the_unused_modules_out(spark: Any) -> None:
    path = spark.sparkContext._jvm.java.lang.System.getProperty("java.class.path")
    assert "spark-sql_" in path and "spark-streaming_" in path, path[:300]
    assert "spark-mllib" not in path and "spark-hive_" not in path, path[:300]


def test_a_users_own_spark_home_is_left_alone(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark-4.3.0-bin-hadoop3"))
    assert sparkhome.for_session("local[2]") is None


def test_sparks_python_processes_import_the_compiled_pyspark(spark: Any) -> None:
    spark.dataSource.register(WhereIsPyspark)
    rows = dict(spark.read.format("where_is_pyspark").load().collect())
    assert set(rows) == {"planner", "worker"}, rows
    for process, path in rows.items():
        assert ".zip" not in path and path.endswith(os.path.join("pyspark", "__init__.py")), \
            (process, path)
