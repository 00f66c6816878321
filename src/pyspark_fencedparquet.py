"""Static registration of ``format("fencedparquet")``: Spark imports top-level ``pyspark_*``
modules at JVM start and registers their ``DefaultSource`` under its ``name()``."""

from orderedstream.sinks.datasource import FencedParquetDataSource


class DefaultSource(FencedParquetDataSource):
    """The fenced Parquet streaming sink (see ``orderedstream.sinks.datasource``)."""


__all__ = ["DefaultSource"]
