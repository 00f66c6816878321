"""Static registration of ``format("rocksstate")``: Spark imports top-level ``pyspark_*``
modules at JVM start and registers their ``DefaultSource`` under its ``name()``."""

from orderedstream.statestore.reader import RockStateDataSource


class DefaultSource(RockStateDataSource):
    """Committed RocksDB state versions as a DataFrame (see ``orderedstream.statestore.reader``)."""


__all__ = ["DefaultSource"]
