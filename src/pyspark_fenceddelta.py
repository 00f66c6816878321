"""Static registration of ``format("fenceddelta")``: Spark imports top-level ``pyspark_*``
modules when a session first looks up a Python Data Source, and registers their
``DefaultSource`` under its ``name()``. Nothing heavy is imported here
(``orderedstream.core.entrypoint``)."""

from orderedstream.core.entrypoint import LazyDataSource


class DefaultSource(LazyDataSource):
    """The Delta Lake streaming sink: an instance is a ``FencedDeltaDataSource``
    (``orderedstream.sinks.deltasource``)."""

    target = "orderedstream.sinks.deltasource:FencedDeltaDataSource"

    @classmethod
    def name(cls) -> str:
        return "fenceddelta"


__all__ = ["DefaultSource"]
