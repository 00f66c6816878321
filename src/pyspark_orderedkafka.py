"""Static registration of ``format("orderedkafka")``: Spark imports top-level ``pyspark_*``
modules at JVM start and registers their ``DefaultSource`` under ``DefaultSource.name()``."""

from orderedstream.python_datasource.source import OrderedKafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
