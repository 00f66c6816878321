"""The foundation layer: what every library of the pack shares, importing none of them.

- ``errors``: the pack's exception classes (one root, one subclass per kind of failure);
- ``storage``: fsspec URLs, exclusive creates and compare-and-swap writes on object storage;
- ``datafile`` and ``commitlog``: the batch commit log, the single point of truth of a batch;
- ``objectstore`` and ``lazys3``: the batch's S3 puts through obstore, and S3 filesystems whose
  s3fs is imported only when a read or listing needs it;
- ``units``: durations and byte sizes as users write them (``"10 minutes"``, ``"128m"``);
- ``jvm``: the one module that reaches the JVM through py4j (the shim's placement calls, one
  Python worker pool for data source reads and UDFs);
- ``pydaemon``: the Python worker daemon of the pack's sessions (pyspark's compiled files, not
  pyspark.zip);
- ``entrypoint``: the base of the ``pyspark_*`` registration modules (a name for Spark's lookup,
  the real source imported when Spark makes an instance);
- ``forkserver``, ``forkserve`` and ``forkclient``: the main job's local session forks Spark's
  planner daemons and streaming source runner from a warm interpreter instead of starting them.
"""
