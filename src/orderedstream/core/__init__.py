"""The foundation layer: what every library of the pack shares, importing none of them.

- ``errors``: the pack's exception classes (one root, one subclass per kind of failure);
- ``storage``: fsspec URLs, exclusive creates and compare-and-swap writes on object storage;
- ``datafile`` and ``commitlog``: the batch commit log, the single point of truth of a batch;
- ``objectstore`` and ``lazys3``: the batch's S3 puts through obstore, and S3 filesystems whose
  s3fs is imported only when a read or listing needs it;
- ``units``: durations and byte sizes as users write them (``"10 minutes"``, ``"128m"``);
- ``jvm``: the shim's placement calls through py4j (only with the shim's jar, which the user
  adds);
- ``entrypoint``: the base of the ``pyspark_*`` registration modules (a name for Spark's lookup,
  the real source imported when Spark makes an instance);
- ``tuning``: the process tuning switch (``ORDEREDSTREAM_PROCESS_TUNING``) and the session
  tuning a session may install for the main job (the embedded local session's, with its fork
  server and worker daemon, lives in ``orderedstream.dev.local``).
"""
