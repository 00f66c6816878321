"""Static registration of ``format("rocksstate")``: Spark imports top-level ``pyspark_*``
modules at JVM start and registers their ``DefaultSource`` under its ``name()``."""

from orderedstream.statestore.ordered.state_source import OrderedRockStateDataSource


class DefaultSource(OrderedRockStateDataSource):
    """Committed RocksDB state as a DataFrame: with option ``table``, the ordered stage's state
    as of a committed batch of that output table
    (``orderedstream.statestore.ordered.state_source``); without it, the store's own versions
    (``orderedstream.statestore.reader``)."""


__all__ = ["DefaultSource"]
