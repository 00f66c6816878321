"""Spark's Python worker daemon, importing pyspark from its installed files, not pyspark.zip.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path. With a
pip-installed pyspark, ``SPARK_HOME`` is the installed package itself, and the zip holds the
very same sources without compiled bytecode: every daemon and every forked worker compiled the
pyspark modules it imports (the cost docs/decisions/0012-trimmed-spark-home.md removes for
Spark's other Python processes). This module is ``spark.python.daemon.module`` of the pack's
sessions: it drops the zip from the path only when the zip belongs to the pyspark package that
the rest of the path imports (so the code run is the same), then runs pyspark's own daemon
unchanged.

Spark also puts the jar of its own ``PythonUtils`` class (``spark-core``, thousands of entries,
no Python in it) on every Python path. Each worker's first task adds Spark's files folder to
the path and calls ``importlib.invalidate_caches()``, which re-reads that jar's central
directory in pure Python for every ``zipimporter`` made on it, a CPU cost for every new worker.
The installed pyspark's own jars are dropped with the zip, on the same condition.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys


def _pyspark_package(path: list[str]) -> str | None:
    """The real folder of the pyspark package ``path`` imports, or None."""
    spec = importlib.machinery.PathFinder.find_spec("pyspark", path)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def installed_zip_entries(path: list[str]) -> list[str]:
    """Entries of ``path`` that are ``<pyspark package>/python/lib/pyspark.zip`` of the pyspark
    package found on the rest of ``path`` (a pip install): safe to leave out.

    Parameters
    ----------
    path
        A module search path (``sys.path``).

    Returns
    -------
    list of str
        Those entries, in ``path``'s order; [] when there are none.

    Runs on
    -------
    executor (Spark's Python worker daemon)"""
    zips = [p for p in path if os.path.basename(p) == "pyspark.zip"]
    package = _pyspark_package([p for p in path if p not in zips]) if zips else None
    return [z for z in zips
            if os.path.realpath(os.path.join(os.path.dirname(z), "..", "..")) == package]


def installed_jar_entries(path: list[str]) -> list[str]:
    """Entries of ``path`` that are jars of the installed pyspark package's ``jars`` folder
    (Spark adds ``spark-core``'s), when pyspark itself is found on the rest of ``path``.

    Parameters
    ----------
    path
        A module search path (``sys.path``).

    Returns
    -------
    list of str
        Those entries, in ``path``'s order; [] when pyspark is not found without them.

    Runs on
    -------
    executor (Spark's Python worker daemon)"""
    jars = [p for p in path if p.endswith(".jar")]
    package = _pyspark_package([p for p in path if p not in jars]) if jars else None
    if package is None:
        return []
    return [j for j in jars
            if os.path.dirname(os.path.realpath(j)) == os.path.join(package, "jars")]


def main() -> None:
    """Run ``pyspark.daemon`` with the installed pyspark's compiled modules."""
    dropped = [*installed_zip_entries(sys.path), *installed_jar_entries(sys.path)]
    for entry in dropped:
        sys.path.remove(entry)
    for key in [k for k in sys.path_importer_cache
                if any(k == e or k.startswith(e + os.sep) for e in dropped)]:
        del sys.path_importer_cache[key]  # zipimporters made on the dropped entries
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
