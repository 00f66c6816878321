"""Resolve JVM classpaths from Maven Central into a cache directory, once.

Kafka's broker (for the local services) and Spark's Kafka connector (for benchmarks) are jars on
Maven Central; ``mvn dependency:copy-dependencies`` fetches them with their transitive
dependencies. A marker file makes the second call free.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from orderedstream.core.errors import ServiceError
from orderedstream.dev.services.cache import cache_root
from orderedstream.dev.services.spark import spark_home

KAFKA_VERSION = "4.1.1"


def _resolve(pom_resource: str, placeholders: dict[str, str], name: str) -> Path:
    target = cache_root() / name
    marker = target / ".complete"
    if marker.exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError(f"Maven ('mvn') is needed once to fetch {name} from Maven Central; "
                           "install Maven (apt-get install maven) and retry.")
    pom_text = resources.files("orderedstream.dev.services").joinpath(
        "resources", pom_resource).read_text()
    for key, value in placeholders.items():
        pom_text = pom_text.replace(f"@{key}@", value)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(pom_text)
        staging = Path(tmp) / "lib"
        settings = resources.files("orderedstream.dev.services").joinpath(
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
    """The classpath of Apache Kafka's broker, its jars fetched from Maven Central once.

    Parameters
    ----------
    version
        The Kafka release.

    Returns
    -------
    str
        ``<folder>/*``, for ``java -cp``.

    Raises
    ------
    ServiceError
        The jars are not cached yet and Maven is missing or could not resolve them."""
    path = _resolve("kafka-broker-pom.xml", {"KAFKA_VERSION": version}, f"kafka-{version}")
    return f"{path}/*"


def spark_kafka_connector_jars(spark_version: str | None = None) -> list[str]:
    """Jar paths of Spark's own Kafka connector for the installed pyspark.

    Maven Central can lag PyPI: when the exact version is not published yet, the newest
    published release of the same major version is used (the connector's API to Spark is
    stable across minor versions), and the version taken is logged.

    Parameters
    ----------
    spark_version
        The Spark release to match; None: the installed pyspark's.

    Returns
    -------
    list of str
        The connector's jars with their dependencies, sorted.

    Raises
    ------
    ServiceError
        No release of that major version could be resolved (each try's error named).
    """
    import logging

    import pyspark

    wanted = spark_version or pyspark.__version__
    major, minor, _patch = (int(x) for x in wanted.split(".")[:3])
    candidates = [wanted] + [f"{major}.{m}.{p}" for m in range(minor, -1, -1)
                             for p in (1, 0) if f"{major}.{m}.{p}" != wanted]
    errors: list[str] = []
    for version in candidates:
        for token_version in [version] + [c for c in candidates if c != version]:
            try:
                path = _resolve("spark-kafka-pom.xml",
                                {"SPARK_VERSION": version, "TOKEN_VERSION": token_version},
                                f"spark-sql-kafka-{version}-tp{token_version}")
            except ServiceError as exc:
                errors.append(f"{version}/{token_version}: {str(exc).splitlines()[0]}")
                if "spark-token-provider" not in str(exc):
                    break  # the connector itself is missing: try an older one
                continue
            if version != wanted or token_version != version:
                logging.getLogger(__name__).warning(
                    "spark-sql-kafka-0-10 %s is not on Maven Central; using %s (token provider "
                    "%s)", wanted, version, token_version)
            return sorted(str(p) for p in path.glob("*.jar"))
    raise ServiceError("no spark-sql-kafka-0-10 release could be resolved: " + "; ".join(errors))


# AWS SDK v2 version each hadoop-aws release was built with (hadoop-project pom,
# aws-java-sdk-v2.version); add a line after checking it for another hadoop-client.
HADOOP_AWS_SDK_VERSIONS = {"3.5.0": "2.35.4"}


def bundled_hadoop_version() -> str:
    """The hadoop-client version pyspark ships (from its hadoop-client-api jar name)."""
    for jar in (spark_home() / "jars").glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise ServiceError(f"no hadoop-client-api jar under {spark_home() / 'jars'}")


def hadoop_aws_jars(hadoop_version: str | None = None) -> list[str]:
    """Jars that let pyspark's Spark read and write ``s3a://`` (hadoop-aws + AWS SDK v2 modules).

    The SDK's huge ``bundle`` jar is replaced by the modules S3A uses; jars whose artifact
    pyspark already ships (netty, httpclient, commons-codec, slf4j, commons-logging via
    jcl-over-slf4j) are left out so Spark's versions win.

    Parameters
    ----------
    hadoop_version
        The hadoop-client release to match; None: the one pyspark ships.

    Returns
    -------
    list of str
        The jars to add to Spark's classpath, sorted.

    Raises
    ------
    ServiceError
        The AWS SDK version for that release is not known, pyspark ships no hadoop-client
        jar, or Maven is missing or could not resolve the jars.
    """
    version = hadoop_version or bundled_hadoop_version()
    sdk = HADOOP_AWS_SDK_VERSIONS.get(version)
    if sdk is None:
        raise ServiceError(f"no known AWS SDK version for hadoop-aws {version}; known: "
                           f"{sorted(HADOOP_AWS_SDK_VERSIONS)}")
    path = _resolve("hadoop-aws-pom.xml", {"HADOOP_VERSION": version, "AWS_SDK_VERSION": sdk},
                    f"hadoop-aws-{version}")
    shipped = {_artifact(p.name) for p in (spark_home() / "jars").glob("*.jar")}
    if "jcl-over-slf4j" in shipped:  # Spark's bridge provides the commons-logging classes
        shipped.add("commons-logging")
    return sorted(str(p) for p in path.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar_name: str) -> str:
    """``netty-buffer-4.1.126.Final.jar`` -> ``netty-buffer``."""
    import re

    return re.sub(r"-\d[\w.]*\.jar$", "", jar_name)
