"""The pack's worker daemon leaves out the installed pyspark's zip and jars, only those."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyspark

from orderedstream.dev.local.pydaemon import installed_zip_entries


def test_the_installed_packages_zip_is_left_out_and_any_other_zip_kept(tmp_path: Path) -> None:
    package = Path(pyspark.__file__).parent
    own = str(package / "python" / "lib" / "pyspark.zip")
    other = tmp_path / "spark-3" / "python" / "lib" / "pyspark.zip"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"")
    path = [own, str(other), *sys.path]
    assert installed_zip_entries(path) == [own]
    # without an installed pyspark on the rest of the path, the zip is all there is: kept
    assert installed_zip_entries([own, str(tmp_path)]) == []


def test_the_installed_packages_jars_are_left_out_and_other_jars_kept(tmp_path: Path) -> None:
    """Spark puts spark-core's jar on every Python path; a worker's first task re-reads its
    directory (about 6,000 entries) when it invalidates the import caches."""
    from orderedstream.dev.local.pydaemon import installed_jar_entries

    package = Path(pyspark.__file__).parent
    core = sorted((package / "jars").glob("spark-core_*.jar"))[0]
    other = tmp_path / "jars" / "spark-core_2.13-4.3.0.jar"
    other.parent.mkdir()
    other.write_bytes(b"")
    assert installed_jar_entries([str(core), str(other), *sys.path]) == [str(core)]
    assert installed_jar_entries([str(core), str(tmp_path)]) == []  # no pyspark elsewhere


def test_a_workers_path_holds_no_spark_jar_and_its_imports_still_work(spark: Any) -> None:
    """In a real session's Python worker (the pack's daemon): no jar on ``sys.path``, and a
    task that imports pyspark's and the pack's modules runs."""

    def probe(_: Any) -> Any:
        import importlib
        import sys

        import orderedstream.statestore.ordered.runner  # noqa: F401

        importlib.invalidate_caches()
        yield [p for p in sys.path if p.endswith(".jar")], sys.modules["pyspark"].__file__

    [(jars, where)] = spark.sparkContext.parallelize([0], 1).mapPartitions(probe).collect()
    assert jars == [] and where == pyspark.__file__
