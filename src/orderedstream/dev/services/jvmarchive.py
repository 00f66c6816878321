"""A class-data-sharing archive (AppCDS) of the main job's driver JVM.

At every start the driver JVM loads, parses and verifies thousands of Spark classes from its
jars; a CDS archive maps them ready-made from one file, and the session starts sooner
(docs/decisions/0011-jvm-class-archive.md). Java 17 writes such a (dynamic) archive only
when a JVM exits (``-XX:ArchiveClassesAtExit``), and a JVM handed a truncated archive crashes
at start, so :func:`build` trains a JVM in a child process, waits until that JVM has exited,
and publishes the file by rename with its size in a note beside it; :func:`java_options` names
an archive only when its size matches. A JVM that cannot use the archive (another JDK or
classpath) starts as before, its CDS messages silenced. ``scripts/bootstrap.sh`` builds it;
``python -m orderedstream.dev.services.jvmarchive`` (re)builds it and prints its path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from orderedstream.dev.local.settings import JOB_CONF, JOB_JAVA_OPTIONS
from orderedstream.dev.services import sparkhome
from orderedstream.dev.services.cache import cache_root

log = logging.getLogger(__name__)
MODULE = "orderedstream.dev.services.jvmarchive"

QUIET = "-Xlog:cds*=off"
"""CDS messages off: an archive the JVM rejects (other JDK or classpath) is not an error."""


def cache_dir() -> Path:
    """``jvm/`` in the pack's cache (shared by clones)."""
    return cache_root() / "jvm"


def _java_home() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.path.realpath(home)
    from shutil import which

    java = which("java")
    return os.path.realpath(java) if java else "?"


def archive_path() -> Path:
    """Where the archive of this pyspark, its Spark home (the classpath), this Java and the
    job's JVM options lives."""
    import pyspark

    home = sparkhome.for_session("local") or sparkhome.installed_home()  # the JVM's classpath
    key = "\n".join([pyspark.__version__, str(sparkhome.installed_home()), str(home),
                     _java_home(), JOB_JAVA_OPTIONS, json.dumps(JOB_CONF, sort_keys=True)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / f"spark-{pyspark.__version__}-{digest}.jsa"


def _note(path: Path) -> Path:
    return path.with_suffix(".json")


def usable(path: Path | None = None) -> Path | None:
    """The archive when it is complete (its size is the one noted when it was published).

    Parameters
    ----------
    path
        The archive; None: :func:`archive_path`.

    Returns
    -------
    pathlib.Path or None
        ``path`` when complete, else None (missing, or its note missing or not matching)."""
    path = path or archive_path()
    try:
        noted = json.loads(_note(path).read_text())["size"]
        return path if path.stat().st_size == noted else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def java_options() -> str:
    """Driver JVM options that use the archive, or ``""`` when there is none (yet)."""
    path = usable()
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path else ""


def build(*, force: bool = False, timeout_s: float = 300.0) -> Path | None:
    """Build and publish the archive: train a JVM in a child process, wait until it has
    exited, then publish the file by rename with its size in a note; superseded archives go.

    Parameters
    ----------
    force
        Build again even when a complete archive exists (else it is kept).
    timeout_s
        Seconds the training run and its JVM's exit have together.

    Returns
    -------
    pathlib.Path or None
        The archive; None when it could not be built (a warning is logged; the job then
        starts without it).

    Raises
    ------
    subprocess.TimeoutExpired
        The training run took longer than ``timeout_s``."""
    final = archive_path()
    if not force and usable(final):
        _prune(final)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.stem}.{os.getpid()}.tmp.jsa")
    tmp.unlink(missing_ok=True)
    deadline = time.monotonic() + timeout_s
    try:
        done = subprocess.run([sys.executable, "-m", MODULE, "--train", str(tmp)],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
        pid = _trained_pid(done.stdout)
        if done.returncode != 0 or pid is None:
            log.warning("JVM archive: the training run failed (exit %s): %s", done.returncode,
                        (done.stderr or done.stdout)[-800:])
            return None
        while psutil.pid_exists(pid):  # the JVM writes the archive as it exits, after Python
            if time.monotonic() > deadline:
                log.warning("JVM archive: the training JVM %d did not exit in %.0f s", pid,
                            timeout_s)
                return None
            time.sleep(0.2)
        size = tmp.stat().st_size if tmp.exists() else 0
        if size == 0:
            log.warning("JVM archive: the training JVM wrote no archive at %s", tmp)
            return None
        _note(final).unlink(missing_ok=True)  # never a note that names another file's size
        os.replace(tmp, final)
        note = _note(final).with_suffix(".json.tmp")
        note.write_text(json.dumps({"size": size, "pyspark": str(sparkhome.installed_home()),
                                    "java": _java_home()}))
        os.replace(note, _note(final))
        _prune(final)
        return final
    finally:
        tmp.unlink(missing_ok=True)


def _prune(keep: Path) -> None:
    """Delete the archives (large files) that no JVM will name again: those of pyspark
    installs that no longer exist (deleted clones' virtual environments), and those of this
    install and Java that ``keep`` supersedes (built for earlier JVM options or Spark home:
    every upgrade of the pack would otherwise leave one behind). An archive of this install
    for another Java stays (a user may switch between JDKs)."""
    mine = json.loads(_note(keep).read_text())
    for note in keep.parent.glob("spark-*.json"):
        if note == _note(keep):
            continue
        try:
            found = json.loads(note.read_text())
            owner, java = found.get("pyspark"), found.get("java")
        except (OSError, ValueError, AttributeError):
            continue
        gone = bool(owner) and not os.path.isdir(owner)
        superseded = owner == mine.get("pyspark") and java in (None, mine.get("java"))
        if gone or superseded:
            note.with_suffix(".jsa").unlink(missing_ok=True)
            note.unlink(missing_ok=True)


def _trained_pid(stdout: str) -> int | None:
    for line in stdout.splitlines():
        if line.startswith("jvm-pid "):
            return int(line.split()[1])
    return None


def _train(target: Path) -> None:
    """The training run: what the main job's driver does before and during its batches
    (session, SQL planning, a streaming query over a Python Data Source with foreachBatch and
    mapInArrow), in a JVM that writes its loaded classes to ``target`` at exit."""
    from orderedstream.dev.services.spark import local_spark_session

    with tempfile.TemporaryDirectory(prefix="orderedstream-cds-") as work:
        # The job's settings (JOB_CONF: no code generation, no AQE, Unix sockets): the classes
        # the job's JVM loads are the ones it runs with.
        spark = local_spark_session(
            "orderedstream-jvm-archive", master="local[2]", tmp_dir=Path(work) / "spark",
            conf=JOB_CONF,
            java_options=f"{JOB_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={target} {QUIET}")
        spark.sparkContext.setLogLevel("ERROR")
        from orderedstream.dev.services._cds_training import run_training

        run_training(spark, Path(work))
        spark.stop()
    # The driver JVM is this process's child (spark-submit execs java); it exits after us.
    (jvm,) = [p for p in psutil.Process().children(recursive=True) if "java" in p.name()]
    print(f"jvm-pid {jvm.pid}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m orderedstream.dev.services.jvmarchive``: (re)build the archive and print
    its path.

    Parameters
    ----------
    argv
        The arguments (None: ``sys.argv[1:]``): ``--force`` rebuilds a complete archive;
        ``--announce`` (the bootstrap's) builds only when there is none, and says so;
        ``--train PATH`` is the training child of :func:`build`.

    Returns
    -------
    int
        The exit code: 0 when an archive is ready, 1 when it could not be built."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--train"] and len(args) == 2:
        _train(Path(args[1]))
        return 0
    logging.basicConfig(level=logging.INFO, format="jvm archive: %(message)s")
    force, announce = "--force" in args, "--announce" in args
    ready = None if force else usable()
    if announce and ready is not None:
        _prune(ready)  # what earlier versions of the pack built for this install goes
        return 0
    if announce:
        print("bootstrap: building the driver JVM's class archive (once per pyspark and Java; "
              "about 30 s)", flush=True)
    began = time.monotonic()
    path = build(force=force)
    if path is None:
        print("jvm archive: not built; the job's JVM starts without it", file=sys.stderr)
        return 1
    print(f"bootstrap: JVM class archive built in {time.monotonic() - began:.0f}s: {path}"
          if announce else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
