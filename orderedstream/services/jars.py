"""Resolve JVM classpaths from Maven Central into a cache directory, once.

Kafka's broker (for the local services) and Spark's Kafka connector (for benchmarks) are jars on
Maven Central; ``mvn dependency:copy-dependencies`` fetches them with their transitive
dependencies. A marker file makes the second call free.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from orderedstream.errors import ServiceError

KAFKA_VERSION = "4.1.1"


def cache_root() -> Path:
    """Where resolved jars live: $ORDEREDSTREAM_CACHE, else ~/.cache/orderedstream."""
    root = os.environ.get("ORDEREDSTREAM_CACHE") or Path.home() / ".cache" / "orderedstream"
    return Path(root)


def _resolve(pom_resource: str, placeholders: dict[str, str], name: str) -> Path:
    target = cache_root() / name
    marker = target / ".complete"
    if marker.exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError(f"Maven ('mvn') is needed once to fetch {name} from Maven Central; "
                           "install Maven (apt-get install maven) and retry.")
    pom_text = resources.files("orderedstream.services").joinpath(
        "resources", pom_resource).read_text()
    for key, value in placeholders.items():
        pom_text = pom_text.replace(f"@{key}@", value)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(pom_text)
        staging = Path(tmp) / "lib"
        settings = resources.files("orderedstream.services").joinpath(
            "resources", "maven-settings.xml")
        proc = subprocess.run(
            [mvn, "-q", "-B", "-gs", str(settings), "-f", str(pom),
             "dependency:copy-dependencies",
             f"-DoutputDirectory={staging}"],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise ServiceError(f"mvn could not resolve {name}:\n{proc.stdout[-3000:]}"
                               f"{proc.stderr[-3000:]}")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    marker.write_text("ok\n")
    return target


def kafka_broker_classpath(version: str = KAFKA_VERSION) -> str:
    """Classpath (dir/*) holding Apache Kafka's broker jars of ``version``."""
    path = _resolve("kafka-broker-pom.xml", {"KAFKA_VERSION": version}, f"kafka-{version}")
    return f"{path}/*"


def spark_kafka_connector_jars(spark_version: str | None = None) -> list[str]:
    """Jar paths of Spark's own Kafka connector for the installed pyspark.

    Maven Central can lag PyPI: when the exact version is not published yet, the newest
    published release of the same major version is used (the connector's API to Spark is
    stable across minor versions), and the version taken is logged.
    """
    import logging

    import pyspark

    wanted = spark_version or pyspark.__version__
    major, minor, _patch = (int(x) for x in wanted.split(".")[:3])
    candidates = [wanted] + [f"{major}.{m}.{p}" for m in range(minor, -1, -1)
                             for p in (1, 0) if f"{major}.{m}.{p}" != wanted]
    errors: list[str] = []
    for version in candidates:
        try:
            path = _resolve("spark-kafka-pom.xml", {"SPARK_VERSION": version},
                            f"spark-sql-kafka-{version}")
        except ServiceError as exc:
            errors.append(f"{version}: {str(exc).splitlines()[0]}")
            continue
        if version != wanted:
            logging.getLogger(__name__).warning(
                "spark-sql-kafka-0-10 %s is not on Maven Central; using %s", wanted, version)
        return sorted(str(p) for p in path.glob("*.jar"))
    raise ServiceError("no spark-sql-kafka-0-10 release could be resolved: " + "; ".join(errors))
