"""Static registration of ``format("rocksstate")``: Spark imports top-level ``pyspark_*``
modules when a session first looks up a Python Data Source, and registers their
``DefaultSource`` under its ``name()``. Nothing heavy is imported here
(``orderedstream.core.entrypoint``)."""

from orderedstream.core.entrypoint import LazyDataSource


class DefaultSource(LazyDataSource):
    """Committed RocksDB state as a DataFrame: with option ``table``, the ordered stage's state
    as of a committed batch of that output table
    (``orderedstream.statestore.ordered.state_source``); without it, the store's own versions
    (``orderedstream.statestore.reader``). An instance is an ``OrderedRockStateDataSource``."""

    target = "orderedstream.statestore.ordered.state_source:OrderedRockStateDataSource"

    @classmethod
    def name(cls) -> str:
        return "rocksstate"


__all__ = ["DefaultSource"]
