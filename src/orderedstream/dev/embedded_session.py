"""The embedded local session: the main job's Spark tuned for one machine, and the only place
that turns the pack's process tuning on.

``orderedstream demo`` and ``orderedstream run`` without ``--master`` run the job in this
session. It is the pack's own process, so it may change it:

- ``ORDEREDSTREAM_PROCESS_TUNING=1`` in the driver's environment, and so in the driver JVM's
  and every Python process it starts (``orderedstream.core.tuning`` lists what that turns on);
- the driver JVM: ``JOB_JAVA_OPTIONS`` (C1 only, the serial collector), the class archive
  (``dev.services.jvmarchive``), ``JOB_CONF`` (small status store, no AQE, no generated code,
  Unix sockets) and ``JOB_ENVIRONMENT`` (``dev.local.settings``);
- Spark's Python processes: a Spark home whose workers run pyspark's compiled files instead of
  ``pyspark.zip`` (``dev.services.sparkhome``), the pack's daemon module
  (``dev.local.pydaemon``), and the fork server for the planner and streaming source processes
  (``dev.local.forkserver``);
- the main job's query: its session tuning (``dev.local.jvm.LocalSessionTuning``, installed
  through ``core.tuning.install_session_tuning``): one pool of Python workers, the warm-up
  job, the release of Spark's planner workers, the checkpoint file manager;
- the driver's py4j and PySpark: converters for NumPy values that do not import pandas
  (``dev.local.jvm.light_numpy_converters``) and ``mapInArrow`` functions built without
  PySpark's pandas version check (:func:`light_arrow_functions`).

Every other session (``orderedstream run --master ...``, local or a cluster, a run launched by
spark-submit, Spark Connect) gets none of this: a plain ``SparkSession.builder`` session with
the user's configuration (``orderedstream.app.run_cli.start_spark``).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

from orderedstream.core import tuning
from orderedstream.core.errors import OptionError
from orderedstream.dev.local.jvm import LocalSessionTuning, light_numpy_converters
from orderedstream.dev.local.settings import JOB_CONF, JOB_ENVIRONMENT, JOB_JAVA_OPTIONS
from orderedstream.dev.services import jvmarchive
from orderedstream.dev.services.spark import local_spark_session

DEFAULT_MASTER = "local[2,4]"
"""Two cores, a failed task retried up to 4 times."""


def embedded_session(app_name: str, *, master: str = DEFAULT_MASTER,
                     tmp_dir: Path | None = None, java_options: str = "") -> Any:
    """The main job's local session on this machine, process tuning on (see the module).

    An environment that sets ``ORDEREDSTREAM_PROCESS_TUNING`` itself keeps its value (``0``:
    the same session, its processes untuned, for measurements).

    Parameters
    ----------
    app_name
        The application's name.
    master
        A local Spark master URL (``local[...]``).
    tmp_dir
        Spark's scratch space and the JVM's temp folder; None: Spark's defaults.
    java_options
        Driver JVM options besides the job's (e.g. a log4j2 configuration).

    Returns
    -------
    pyspark.sql.SparkSession
        The session.

    Raises
    ------
    OptionError
        ``master`` is not a local master.

    Runs on
    -------
    driver"""
    if not master.startswith("local"):
        raise OptionError(f"master {master!r}: the embedded session runs on a local master "
                          "(local[...]); a cluster gets a plain SparkSession")
    tune_this_process()
    options = [JOB_JAVA_OPTIONS, jvmarchive.java_options(), java_options]
    return local_spark_session(app_name, master=master, tmp_dir=tmp_dir, conf=JOB_CONF,
                               java_options=" ".join(o for o in options if o),
                               environment=JOB_ENVIRONMENT, fork_server=True)


def tune_this_process() -> None:
    """The driver's part of the embedded session, before its JVM starts: the process tuning
    on for this process and every one it starts (unless the environment sets the variable),
    PySpark's NumPy converters and ``mapInArrow`` functions without pandas, and the main job's
    session tuning installed."""
    os.environ.setdefault(tuning.ENV, "1")
    tuning.install_session_tuning(LocalSessionTuning())
    light_numpy_converters()  # else the first py4j call imports pandas into the driver
    light_arrow_functions()


def light_arrow_functions() -> bool:
    """Let ``DataFrame.mapInArrow`` build its function without importing pandas; True when
    installed (idempotent).

    PySpark builds ``mapInArrow``'s function through ``pandas_udf``, which imports pandas in
    the driver only to check its version, although an Arrow function never uses it. While
    pandas is not imported, an Arrow map function is built by the same PySpark function
    ``pandas_udf`` calls after its checks (``vectorized_udf``): the same plan. Every other
    function type, and every call once pandas is imported, goes to ``pandas_udf`` as before.
    Off with ``ORDEREDSTREAM_LAZY_PANDAS=0`` or an unknown PySpark."""
    from orderedstream.core.pandaslazy import enabled

    if not enabled():
        return False
    try:
        from pyspark.sql.pandas import functions
        from pyspark.util import PythonEvalType
        build = functions.vectorized_udf  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        return False
    original = functions.pandas_udf
    if getattr(original, "_orderedstream_light", False):
        return True
    arrow_map = PythonEvalType.SQL_MAP_ARROW_ITER_UDF

    @functools.wraps(original)
    def pandas_udf(f: Any = None, returnType: Any = None,  # noqa: N803 - PySpark's names
                   functionType: Any = None) -> Any:
        if functionType == arrow_map and callable(f) and "pandas" not in sys.modules:
            return build(f, returnType, functionType, "pandas")
        return original(f, returnType, functionType)

    pandas_udf._orderedstream_light = True  # type: ignore[attr-defined]
    functions.pandas_udf = pandas_udf
    return True


__all__ = ["DEFAULT_MASTER", "embedded_session", "light_arrow_functions", "tune_this_process"]
