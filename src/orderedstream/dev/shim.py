"""Development support: builds the JVM shim (``jvm-shim/``, Maven) into ``orderedstream/jars/``.

Command line (used by ``scripts/bootstrap.sh``)::

    python -m orderedstream.dev.shim build [--quiet] [--force] [--with-tests]
    python -m orderedstream.dev.shim test       # the JUnit tests (mvn test)
    python -m orderedstream.dev.shim path       # the bundled jar, if built
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from orderedstream.core.errors import ShimBuildError
from orderedstream.core.jvm import JARS_DIR, bundled_jar
from orderedstream.dev.services.spark import spark_home

#: The Maven module, present in a source checkout (not in an installed wheel).
SOURCE_DIR = Path(__file__).resolve().parents[3] / "jvm-shim"
_STAMP_NAME = ".orderedstream-build-stamp"


def shim_version(source_dir: Path = SOURCE_DIR) -> str:
    """The version in ``jvm-shim/pom.xml`` (the jar is named after it).

    Parameters
    ----------
    source_dir
        The shim's Maven module.

    Returns
    -------
    str
        The shim's version.

    Raises
    ------
    OSError
        ``source_dir`` has no ``pom.xml``.
    ShimBuildError
        The pom names no version of ``orderedstream-shim``."""
    pom = (source_dir / "pom.xml").read_text()
    match = re.search(r"<artifactId>orderedstream-shim</artifactId>\s*<version>([^<]+)</version>",
                      pom)
    if match is None:
        raise ShimBuildError(f"{source_dir / 'pom.xml'} has no <version> after "
                             "<artifactId>orderedstream-shim</artifactId>")
    return match.group(1).strip()


def _spark_jars_dir() -> Path:
    jars = spark_home() / "jars"
    if not jars.is_dir():
        raise ShimBuildError(f"pyspark's jars directory {jars} is missing: the shim compiles "
                             "against the Spark jars pyspark ships (pip install pyspark)")
    return jars


def _source_hash(source_dir: Path, spark_jars: Path) -> str:
    """Hash of everything the jar is made from: pom, main sources, the Spark jars' identity."""
    digest = hashlib.sha256()
    files = [source_dir / "pom.xml", *sorted((source_dir / "src" / "main").rglob("*"))]
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(source_dir)).encode() + b"\0")
            digest.update(path.read_bytes())
    for jar in sorted(spark_jars.glob("spark-*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return digest.hexdigest()


def _maven(args: list[str], source_dir: Path, spark_jars: Path, quiet: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ShimBuildError("'mvn' is not on PATH: Maven 3.8+ builds the JVM shim "
                             "(Debian: apt-get install maven)")
    command = [mvn, "-B", *(["-q"] if quiet else []), f"-Dspark.jars.dir={spark_jars}", *args]
    result = subprocess.run(command, cwd=source_dir, capture_output=quiet, text=True,
                            check=False)
    if result.returncode != 0:
        output = ((result.stdout or "") + (result.stderr or ""))[-6000:]
        raise ShimBuildError(f"'{' '.join(command)}' failed in {source_dir} "
                             f"(exit {result.returncode}){':' if output else ''}\n{output}")


def build(*, quiet: bool = False, force: bool = False, with_tests: bool = False,
          source_dir: Path = SOURCE_DIR, announce: bool = False) -> Path:
    """Build the shim jar if its sources changed and copy it to ``orderedstream/jars/``.

    A stamp (hash of pom, sources and pyspark's Spark jars) makes a second run with nothing
    changed a hash check only, without Maven.

    Parameters
    ----------
    quiet
        Silence Maven and the closing line (failures still carry Maven's output).
    force
        Build even when the stamp matches.
    with_tests
        Run the JUnit tests too (otherwise ``-DskipTests``); always builds.
    source_dir
        The shim's Maven module.
    announce
        Say when a build starts and ends (even with ``quiet``).

    Returns
    -------
    pathlib.Path
        The bundled jar in ``orderedstream/jars/``.

    Raises
    ------
    ShimBuildError
        No source checkout, no pyspark jars, no ``mvn``, or the Maven build failed.
    """
    if not (source_dir / "pom.xml").is_file():
        raise ShimBuildError(f"no {source_dir / 'pom.xml'}: the shim is built from a source "
                             "checkout (an installed distribution ships the built jar)")
    version = shim_version(source_dir)
    spark_jars = _spark_jars_dir()
    target = JARS_DIR / f"orderedstream-shim-{version}.jar"
    stamp = source_dir / "target" / _STAMP_NAME
    want = _source_hash(source_dir, spark_jars)
    if (not force and not with_tests and target.is_file() and stamp.is_file()
            and stamp.read_text().strip() == want):
        return target
    started = time.monotonic()
    if announce:
        print(f"bootstrap: building the JVM shim with Maven ({source_dir}; about a minute the "
              "first time)", flush=True)
    _maven(["package", *([] if with_tests else ["-DskipTests"])], source_dir, spark_jars, quiet)
    built = source_dir / "target" / f"orderedstream-shim-{version}.jar"
    if not built.is_file():
        raise ShimBuildError(f"Maven finished but {built} is missing")
    JARS_DIR.mkdir(parents=True, exist_ok=True)
    for stale in JARS_DIR.glob("orderedstream-shim-*.jar"):
        if stale != target:
            stale.unlink()
    partial = target.with_suffix(".jar.partial")
    shutil.copyfile(built, partial)
    partial.replace(target)
    stamp.write_text(want + "\n")
    if not quiet:
        print(f"orderedstream shim: {target}")
    if announce:
        print(f"bootstrap: JVM shim built in {time.monotonic() - started:.0f}s: {target}",
              flush=True)
    return target


def run_tests(*, quiet: bool = False, source_dir: Path = SOURCE_DIR) -> None:
    """Run the shim's JUnit tests (``mvn test``).

    Parameters
    ----------
    quiet
        Silence Maven (a failure still carries its output).
    source_dir
        The shim's Maven module.

    Raises
    ------
    ShimBuildError
        A test failed, or ``mvn`` or pyspark's jars are missing."""
    _maven(["test"], source_dir, _spark_jars_dir(), quiet)


def main(argv: list[str] | None = None) -> int:
    """``python -m orderedstream.dev.shim {build,test,path}``.

    Parameters
    ----------
    argv
        The arguments (``--help`` lists them); None: ``sys.argv``.

    Returns
    -------
    int
        The exit code: 0 on success, 1 when the build or tests failed or no jar is built
        (the reason on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m orderedstream.dev.shim",
                                     description="Build and test the orderedstream JVM shim.")
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build the jar if its sources changed")
    build_cmd.add_argument("--quiet", action="store_true", help="print only on failure")
    build_cmd.add_argument("--force", action="store_true", help="rebuild even if unchanged")
    build_cmd.add_argument("--with-tests", action="store_true", help="run JUnit tests too")
    build_cmd.add_argument("--announce", action="store_true",
                           help="say when a build starts and ends (with --quiet too)")
    test_cmd = commands.add_parser("test", help="run the JUnit tests (mvn test)")
    test_cmd.add_argument("--quiet", action="store_true")
    commands.add_parser("path", help="print the bundled jar's path (exit 1 if not built)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(quiet=args.quiet, force=args.force, with_tests=args.with_tests,
                  announce=args.announce)
        elif args.command == "test":
            run_tests(quiet=args.quiet)
        else:
            jar = bundled_jar()
            if jar is None:
                print("orderedstream shim jar not built", file=sys.stderr)
                return 1
            print(jar)
    except ShimBuildError as exc:
        print(f"orderedstream shim: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
