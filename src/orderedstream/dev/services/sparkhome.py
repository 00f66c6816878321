"""A Spark home for the pack's local sessions whose Python processes run compiled pyspark.

A pip-installed pyspark is its own ``SPARK_HOME``, and Spark puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it starts. The
zip holds the package's own sources without bytecode, so each process compiles the pyspark
modules it imports, where the installed files come compiled. ``dev.local.pydaemon`` avoids it
for UDF workers; Spark's planner processes (data source lookup, creation, read planning) and the
streaming source runner start their own modules. This home is the installed pyspark's folder
entry by entry through symbolic links, without ``python/lib/pyspark.zip``: the same files run,
compiled, and the job starts sooner (docs/decisions/0012-trimmed-spark-home.md).

Its ``jars/`` leaves out the jars of Spark modules a local session of the pack never runs
(:data:`LEFT_OUT`: MLlib, GraphX, Hive, Spark Connect, the YARN and Kubernetes schedulers, and
the largest libraries only they use: Hive's, Derby, DataNucleus, breeze, the Kubernetes
client). MLlib's jar registers a session extension that builds its SQL functions with Scala
reflection at every session start, and every service lookup scans each jar on the class path.
The home's name digests the install's path and the jars it links, so a published home never
changes: another pyspark or another set of jars gets a home of its own.

Only for local masters: every process then runs on this machine. Kept under
``~/.cache/orderedstream/spark-home/`` (``$ORDEREDSTREAM_CACHE``), one per pyspark
install, created atomically; making one removes the homes of deleted installs (:func:`prune`).
:func:`for_session` gives ``None`` (use the install as it is) when ``SPARK_HOME`` names
another Spark or the install has no ``pyspark.zip``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from orderedstream.dev.services.cache import cache_root as pack_cache

ZIP = os.path.join("python", "lib", "pyspark.zip")

LEFT_OUT = ("spark-mllib_", "spark-mllib-local_", "breeze_", "breeze-macros_", "spark-graphx_",
            "spark-hive_", "spark-hive-thriftserver_", "hive-beeline-", "hive-cli-",
            "hive-common-", "hive-exec-", "hive-jdbc-", "hive-metastore-", "hive-serde-",
            "hive-service-rpc-", "hive-shims-", "datanucleus-", "derby-", "derbyshared-",
            "derbytools-", "spark-connect_", "spark-yarn_", "spark-kubernetes_", "kubernetes-",
            "volcano-")
"""Name prefixes of the jars the home's ``jars/`` leaves out. Kept: all of Spark core, SQL,
streaming and their file formats (``hive-storage-api`` is ORC's)."""


def cache_root() -> Path:
    """``spark-home/`` in the pack's cache (shared by clones)."""
    return pack_cache() / "spark-home"


def installed_home() -> Path:
    """The pip-installed pyspark package folder (Spark's home when ``SPARK_HOME`` is unset)."""
    import pyspark

    return Path(os.path.realpath(os.path.dirname(pyspark.__file__)))


def for_session(master: str) -> Path | None:
    """The home a local session's JVM should get (made on first use).

    Parameters
    ----------
    master
        The session's Spark master URL.

    Returns
    -------
    pathlib.Path or None
        The home; None (leave ``SPARK_HOME`` alone) for a master that is not local, when
        ``SPARK_HOME`` names another Spark, or when the install has no ``pyspark.zip``.

    Raises
    ------
    OSError
        The home could not be made in the pack's cache folder."""
    if not master.startswith("local"):
        return None
    real = installed_home()
    current = os.environ.get("SPARK_HOME")
    if current and os.path.realpath(current) != str(real) and not _is_ours(Path(current)):
        return None  # the user's own Spark distribution
    if not (real / ZIP).is_file():
        return None
    return ensure(real)


def _is_ours(path: Path) -> bool:
    return os.path.realpath(path.parent) == os.path.realpath(cache_root())


def ensure(real: Path) -> Path:
    """The home mirroring ``real`` without its pyspark.zip and the :data:`LEFT_OUT` jars,
    made on first use in a draft folder and published by a rename (a process that finds it
    complete uses it as it is); publishing one prunes the homes of deleted installs.

    Parameters
    ----------
    real
        The pyspark install's folder (:func:`installed_home`).

    Returns
    -------
    pathlib.Path
        The home, complete.

    Raises
    ------
    OSError
        The home could not be made or published."""
    import pyspark

    kept = _kept_jars(real)
    names = sorted(e.name for e in kept)
    digest = hashlib.sha256("\n".join([str(real), *names]).encode()).hexdigest()[:12]
    home = cache_root() / f"pyspark-{pyspark.__version__}-{digest}"
    if _complete(home, real, names):
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    draft = Path(tempfile.mkdtemp(prefix=f".{home.name}.", dir=home.parent))
    try:
        for entry in real.iterdir():
            if entry.name not in ("python", "jars"):
                (draft / entry.name).symlink_to(entry)
        (draft / "jars").mkdir()
        for entry in kept:
            (draft / "jars" / entry.name).symlink_to(entry)
        for entry in (real / "python").iterdir():
            if entry.name != "lib":
                (draft / "python").mkdir(exist_ok=True)
                (draft / "python" / entry.name).symlink_to(entry)
        lib = draft / "python" / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        for entry in (real / "python" / "lib").iterdir():
            if entry.name != "pyspark.zip":
                (lib / entry.name).symlink_to(entry)
        if _complete(home, real, names):  # another process finished first
            return home
        if home.exists() or home.is_symlink():
            shutil.rmtree(home, ignore_errors=True)  # a stale one (its links are broken)
        try:
            os.rename(draft, home)
        except OSError:
            if not _complete(home, real, names):
                raise
        prune(keep=home)
        return home
    finally:
        shutil.rmtree(draft, ignore_errors=True)


DRAFT_AGE_S = 3600.0
"""A draft folder (``.pyspark-...``) older than this belongs to a process that died building it."""


def prune(*, keep: Path) -> list[Path]:
    """Remove the homes no JVM can run any more, beside a newly published ``keep``: those whose
    pyspark install is gone (its links broken: a deleted clone's virtual environment), and
    drafts older than :data:`DRAFT_AGE_S`. A home of an install that still exists stays, even
    if superseded: a running job of an earlier version of the pack may still use it.

    Parameters
    ----------
    keep
        The home just published; its folder's other entries are looked at.

    Returns
    -------
    list of pathlib.Path
        What was removed (nothing when the folder cannot be listed)."""
    removed = []
    now = time.time()
    try:
        entries = list(keep.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if entry == keep or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            if entry.name.startswith("."):
                stale = now - entry.stat().st_mtime > DRAFT_AGE_S
            else:
                stale = (entry / "bin").is_symlink() and not (entry / "bin").exists()
        except OSError:
            continue
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _kept_jars(real: Path) -> list[Path]:
    """The entries of the install's ``jars/`` the home links (all but :data:`LEFT_OUT`)."""
    return [e for e in (real / "jars").iterdir() if not e.name.startswith(LEFT_OUT)]


def _complete(home: Path, real: Path, jar_names: list[str]) -> bool:
    """Every entry of ``real`` (but the zip) is in ``home`` and resolves to it, and its
    ``jars/`` holds exactly the kept jars ``jar_names``."""
    try:
        names = {e.name for e in real.iterdir()}
        mirrored = {e.name for e in home.iterdir()}
        jars = {e.name for e in (home / "jars").iterdir()}
        return (names <= mirrored and (home / "bin" / "spark-submit").is_file()
                and not (home / "jars").is_symlink()
                and jars == set(jar_names)
                and not (home / ZIP).exists())
    except OSError:
        return False
