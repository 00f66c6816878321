"""Fenced, exactly-once Parquet output on any fsspec path (S3, local, ...), and Delta Lake output.

Delta Lake: ``deltacommit`` (one Delta commit per batch; the design), ``deltaforeach``
(``DeltaBatchWriter``), ``deltasource`` (``format("fenceddelta")``), ``deltalog``
(``DeltaBatchLog``: the batch-log read API over ``_delta_log``; ``open_batch_log(url)`` opens
the right log for a table), ``deltafiles`` (add actions, delta-rs storage options),
``filestats`` (Delta statistics collected while writing).

- ``orderedstream.core.commitlog``: the batch commit log (one exclusive record per batch; writer
  epochs).
- ``orderedstream.sinks.writer``: executor-side bounded Parquet file writing
  (``write_parquet_files``).
- ``orderedstream.sinks.table``: the committed view (live files, schema, pyarrow dataset,
  ``_spark_metadata``).
- ``orderedstream.sinks.commit``: the one publish path of a batch (``prepare_batch``,
  ``publish_batch``: exclusive record, then ``_spark_metadata``), shared by both entry points
  and the ordered stage (``orderedstream.statestore.ordered``).
- ``orderedstream.sinks.foreach``: ``FencedParquetBatchWriter`` for ``foreachBatch``.
- ``orderedstream.sinks.datasource``: the ``fencedparquet`` streaming Python Data Source sink.
- ``orderedstream.sinks.maintenance``: compaction and vacuum; ``orderedstream.sinks.cli``:
  ``python -m orderedstream.sinks``.

Table layout under the root URL::

    _fenced/epoch.json                 writer epoch (compare-and-swap)
    _fenced/log/<version>.json         commit records, created exclusively: THE truth
    _spark_metadata/<version>[.compact] derived from the records, for spark.read.parquet(root)
    [col=value/]part-*.parquet         data files, unique names, never overwritten

A version is a batch commit (``batch_id`` set) or a maintenance change (compaction, or an
empty filler that moves a compaction onto a ``_spark_metadata`` compaction point). Readers
that go through the records (``FencedTable``) or the Spark log see exactly the committed
rows; files no record lists are orphans for vacuum.
"""

from orderedstream.core.commitlog import CommitLog, CommitRecord, Epoch
from orderedstream.core.datafile import DataFile
from orderedstream.sinks.deltalog import DeltaBatchLog, open_batch_log

__all__ = ["CommitLog", "CommitRecord", "DataFile", "DeltaBatchLog", "Epoch", "open_batch_log"]
