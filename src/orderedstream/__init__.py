"""orderedstream: ordered, exactly-once, stateful streaming from Kafka to S3 Parquet on PySpark.

The pack is three user-facing packages, each usable on its own:

- ``python_datasource``: the ``orderedkafka`` Python Data Source (Kafka partitions in offset order);
- ``statestore``: RocksDB per-key state, versioned by batch id, snapshotted to fsspec storage;
- ``sinks``: Parquet sinks committed exactly once, fenced by batch id with conditional writes.

This package holds what they share (errors, fencing on object storage), the local services used by
the demo and the tests, and the main job.
"""

__version__ = "0.1.0"
