"""The main job's driver JVM class archive: a training JVM builds it, it is published only
complete, a job's JVM then takes Spark's classes from it, and an incomplete archive (which
would crash a JVM at start) is never named in the JVM's options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orderedstream.dev.services import jvmarchive

SESSION = """
import sys
from pathlib import Path
from orderedstream.dev.services import jvmarchive
from orderedstream.dev.local.settings import JOB_JAVA_OPTIONS
from orderedstream.dev.services.spark import local_spark_session
log, work = sys.argv[1], Path(sys.argv[2])
options = f"{JOB_JAVA_OPTIONS} {jvmarchive.java_options()} -Xlog:class+load=info:file={log}"
spark = local_spark_session("archive-check", "local[1]", tmp_dir=work, java_options=options)
assert spark.range(10).count() == 10
spark.stop()
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORDEREDSTREAM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "jvm"


@pytest.mark.slow  # a whole build; scripts/bootstrap.sh builds and uses the archive every run
def test_the_archive_is_built_complete_and_serves_sparks_classes(cache: Path,
                                                                 tmp_path: Path) -> None:
    assert jvmarchive.java_options() == ""  # none yet: the JVM starts as before
    path = jvmarchive.build()
    assert path is not None and path.parent == cache and jvmarchive.usable() == path
    note = json.loads(path.with_suffix(".json").read_text())
    assert note["size"] == path.stat().st_size and os.path.isdir(note["pyspark"])
    assert sorted(p.name for p in cache.iterdir()) == [path.name, path.with_suffix(".json").name]
    assert jvmarchive.java_options() == f"-XX:SharedArchiveFile={path} -Xlog:cds*=off"
    assert jvmarchive.build() == path  # kept: a second call builds nothing

    log = tmp_path / "classes.log"
    done = subprocess.run([sys.executable, "-c", SESSION, str(log), str(tmp_path / "spark")],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "ORDEREDSTREAM_CACHE": str(cache.parent)})
    assert done.returncode == 0, done.stderr[-2000:]
    loads = [line for line in log.read_text().splitlines()
             if " org.apache.spark.SparkContext " in line]
    assert loads and "source: shared objects file (top)" in loads[0], loads


def test_an_incomplete_archive_is_never_named(cache: Path) -> None:
    path = jvmarchive.archive_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0" * 100)  # e.g. a JVM killed while writing it
    assert jvmarchive.usable() is None  # no note: never published
    path.with_suffix(".json").write_text(json.dumps({"size": 4096}))
    assert jvmarchive.usable() is None and jvmarchive.java_options() == ""
    path.with_suffix(".json").write_text(json.dumps({"size": 100}))
    assert jvmarchive.usable() == path


def test_publishing_prunes_archives_no_jvm_will_name_again(cache: Path, tmp_path: Path) -> None:
    """Each archive is about 170 MB: a newly published one deletes those of deleted installs
    and the ones it supersedes for the same install and Java (earlier JVM options), and keeps
    this install's archive for another Java."""
    import pyspark  # noqa: F401  (the install the archives name)

    from orderedstream.dev.services import sparkhome

    cache.mkdir(parents=True)
    mine, java = str(sparkhome.installed_home()), jvmarchive._java_home()

    def archive(name: str, **note: str) -> Path:
        path = cache / f"spark-{name}.jsa"
        path.write_bytes(b"\0" * 64)
        path.with_suffix(".json").write_text(json.dumps({"size": 64, **note}))
        return path

    keep = archive("current", pyspark=mine, java=java)
    older = archive("older-options", pyspark=mine, java=java)
    before_java_noted = archive("older-note", pyspark=mine)
    other_java = archive("other-java", pyspark=mine, java=str(tmp_path / "another-jdk"))
    deleted_clone = archive("deleted-clone", pyspark=str(tmp_path / "gone" / "pyspark"),
                            java=java)
    other_install = archive("other-install", pyspark=str(tmp_path), java=java)
    jvmarchive._prune(keep)
    left = sorted(p.name for p in cache.glob("*.jsa"))
    assert left == sorted([keep.name, other_java.name, other_install.name]), left
    for gone in (older, before_java_noted, deleted_clone):
        assert not gone.exists() and not gone.with_suffix(".json").exists()
