"""Static registration of ``format("orderedkafka")``: Spark imports top-level ``pyspark_*``
modules when a session first looks up a Python Data Source, and registers their
``DefaultSource`` under its ``name()``. Nothing heavy is imported here
(``orderedstream.core.entrypoint``); the source is
``orderedstream.python_datasource.OrderedKafkaDataSource``."""

from orderedstream.core.entrypoint import LazyDataSource


class DefaultSource(LazyDataSource):
    """``format("orderedkafka")``: an instance is an ``OrderedKafkaDataSource``."""

    target = "orderedstream.python_datasource.source:OrderedKafkaDataSource"

    @classmethod
    def name(cls) -> str:
        return "orderedkafka"


__all__ = ["DefaultSource"]
