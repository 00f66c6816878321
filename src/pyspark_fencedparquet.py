"""Static registration of ``format("fencedparquet")``: Spark imports top-level ``pyspark_*``
modules when a session first looks up a Python Data Source, and registers their
``DefaultSource`` under its ``name()``. Nothing heavy is imported here
(``orderedstream.core.entrypoint``)."""

from orderedstream.core.entrypoint import LazyDataSource


class DefaultSource(LazyDataSource):
    """The fenced Parquet streaming sink: an instance is a ``FencedParquetDataSource``
    (``orderedstream.sinks.datasource``)."""

    target = "orderedstream.sinks.datasource:FencedParquetDataSource"

    @classmethod
    def name(cls) -> str:
        return "fencedparquet"


__all__ = ["DefaultSource"]
