"""The embedded local session's machine tuning, used by ``orderedstream.dev.embedded_session``
(and the development sessions of ``orderedstream.dev.services.spark``) only:

- ``settings``: the driver JVM's options and environment, ``JOB_CONF``, Unix domain sockets;
- ``forkserver``, ``forkserve`` and ``forkclient``: Spark's planner daemons and streaming
  source runner forked from a warm interpreter instead of started cold;
- ``pydaemon``: the Python worker daemon (pyspark's compiled files, not ``pyspark.zip``);
- ``jvm``: the main job's session tuning through py4j (one worker pool, the planner workers'
  release, the checkpoint file manager) and PySpark's NumPy converters without pandas.

Nothing here is imported by a library, ``core`` or ``app.job``: those get the session tuning
through ``orderedstream.core.tuning.session_tuning``. Spark's Python workers import
``pydaemon`` and ``forkserve`` by name, so this package's ``__init__`` imports nothing.
"""
