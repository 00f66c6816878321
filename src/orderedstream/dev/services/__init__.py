"""Real services on loopback for the embedded demo and the tests.

Each service runs as a local process from packages (Kafka from its Maven Central jars, S3 from
SeaweedFS's wheel, Spark from pyspark). Where a Docker engine answers, ``containers`` gives the
same API from testcontainers instead. ``jvmarchive`` keeps the main job's driver JVM class
archive (AppCDS) that makes its Spark session start faster.
"""

from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.dev.services.s3 import S3Server
from orderedstream.dev.services.spark import SparkStandaloneCluster, local_spark_session

__all__ = ["KafkaBroker", "S3Server", "SparkStandaloneCluster", "local_spark_session"]
