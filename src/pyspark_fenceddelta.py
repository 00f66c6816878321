"""Static registration of ``format("fenceddelta")``: Spark imports top-level ``pyspark_*``
modules at JVM start and registers their ``DefaultSource`` under its ``name()``."""

from orderedstream.sinks.deltasource import FencedDeltaDataSource


class DefaultSource(FencedDeltaDataSource):
    """The Delta Lake streaming sink (see ``orderedstream.sinks.deltasource``)."""


__all__ = ["DefaultSource"]
