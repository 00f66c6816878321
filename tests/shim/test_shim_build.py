"""The shim's build: stamped Maven package into orderedstream/jars, JUnit, the CLI."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from orderedstream.dev import shim


def test_build_ships_the_jar_in_the_package(shim_jar: Path) -> None:
    assert shim_jar.parent == shim.JARS_DIR
    assert shim_jar.name == f"orderedstream-shim-{shim.shim_version()}.jar"
    with zipfile.ZipFile(shim_jar) as jar:
        names = set(jar.namelist())
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    for cls in ("StickyPlacement", "PlacementPlanner", "PreferredLocationsRDD",
                "PlacementRecorder", "ExecutorSlot"):
        assert f"orderedstream/shim/{cls}.class" in names
    assert not any(name.startswith(("org/apache/spark/", "scala/")) for name in names), \
        "Spark and Scala are provided by the cluster and must not be packaged"
    assert f"Implementation-Version: {shim.shim_version()}" in manifest
    assert shim.bundled_jar() == shim_jar


def test_second_build_is_a_no_op(shim_jar: Path) -> None:
    before = shim_jar.stat().st_mtime_ns
    stamp = shim.SOURCE_DIR / "target" / ".orderedstream-build-stamp"
    stamp_before = stamp.read_text()
    assert shim.build(quiet=True) == shim_jar
    assert shim_jar.stat().st_mtime_ns == before, "an unchanged shim must not be rebuilt"
    assert stamp.read_text() == stamp_before


def test_cli_build_and_path(shim_jar: Path) -> None:
    build = subprocess.run([sys.executable, "-m", "orderedstream.dev.shim", "build", "--quiet"],
                           check=False, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    assert build.stdout == ""
    path = subprocess.run([sys.executable, "-m", "orderedstream.dev.shim", "path"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert path.returncode == 0, path.stderr
    assert Path(path.stdout.strip()) == shim_jar


def test_junit_placement_logic(shim_jar: Path) -> None:
    """The shim's JUnit tests (mvn test) pass; their reports count every test."""
    shim.run_tests(quiet=True)
    reports = sorted((shim.SOURCE_DIR / "target" / "surefire-reports").glob("TEST-*.xml"))
    names = {report.name for report in reports}
    assert {"TEST-orderedstream.shim.PlacementPlannerTest.xml",
            "TEST-orderedstream.shim.ExecutorSlotTest.xml",
            "TEST-orderedstream.shim.PosixModeTest.xml"} <= names
    for report in reports:
        head = report.read_text()[:2000]
        assert 'failures="0"' in head and 'errors="0"' in head, report
