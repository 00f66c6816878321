"""``orderedstream run``: the main job against given services, with checks first, live
progress, an optional Prometheus metrics file and restarts after transient failures.

Order of a run: options and locations are checked (Kafka answers, every location takes a
probe object) before Spark starts, so a bad input fails in seconds with the pack's sentence
first; then the Spark session, the query and its progress. A failure inside the query is
printed reason first as soon as the progress view stops: its first line is
``orderedstream: <ErrorClass>: <message>``, Spark's report goes to the log file (its path is
the next line) unless ``--verbose`` (``orderedstream.app.console.report_failure``). A failure
that is not one of the pack's refusals (a broker restart, a lost executor) restarts the query
from its checkpoint, up to ``--max-restarts`` times; the pack's own errors (options, schema,
order, state, storage) never restart: they need a person.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orderedstream.app.console import ConsoleSetup, first_line, report_failure, setup_console
from orderedstream.core.errors import (
    KafkaUnavailableError,
    OptionError,
    OrderedStreamError,
    ServiceError,
    pack_error_in,
)
from orderedstream.core.shutdown import stop_session

RESTART_BACKOFF_S = 5.0


def start_spark(app_name: str, master: str | None, console: ConsoleSetup,
                tmp_dir: Path | None = None, *, embedded: bool = False,
                remote: str | None = None) -> Any:
    """The session, by where the job runs:

    - ``remote`` (``--remote sc://HOST:PORT``): a Spark Connect session to that server, whose
      Python workers must have the pack installed (``docs/connect.md``); not with ``master``;
    - no ``--master`` and not launched by spark-submit, or a local master with ``embedded``
      (the demo's): the embedded local session
      (``orderedstream.dev.embedded_session``: tuned for this machine, quiet, its JVM logging
      to the run's log file); the only one that turns the pack's process tuning on
      (``core.tuning``);
    - launched by spark-submit (``PYSPARK_GATEWAY_PORT``, no ``--master``): spark-submit's
      session, configured by its ``--master``, ``--conf`` and ``--jars``;
    - any other ``--master`` (``local[...]``, ``spark://...``, ``yarn``, ``k8s://...``): a plain
      ``SparkSession.builder`` session with the user's configuration (``spark-defaults.conf``,
      ``PYSPARK_SUBMIT_ARGS``, ``PYSPARK_PYTHON``: the executors' Python must have the pack
      installed; on a local master it defaults to this interpreter).

    Parameters
    ----------
    app_name
        The Spark application's name.
    master
        ``--master``; None: spark-submit's session, else the embedded one.
    console
        The console's setup (the embedded session's JVM logs to its log file).
    tmp_dir
        The embedded session's scratch folder; None: its default.
    embedded
        A local ``master`` gets the embedded session too (the demo).
    remote
        ``--remote``, a Spark Connect URL; None: no Spark Connect.

    Returns
    -------
    SparkSession
        The session, its log level set to WARN (except through Spark Connect).

    Raises
    ------
    OptionError
        Both ``remote`` and ``master`` are given.

    Runs on
    -------
    driver"""
    if remote is not None:
        if master is not None:
            raise OptionError(f"--remote {remote} and --master {master}: one of them (--remote "
                              "runs the job through Spark Connect, on the server's master)")
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
    local = master is not None and master.startswith("local")
    if (master is None and not os.environ.get("PYSPARK_GATEWAY_PORT")) or (embedded and local):
        from orderedstream.dev.embedded_session import DEFAULT_MASTER, embedded_session

        spark = embedded_session(app_name, master=master or DEFAULT_MASTER, tmp_dir=tmp_dir,
                                 java_options=console.java_options())
    else:
        spark = plain_session(app_name, master)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def plain_session(app_name: str, master: str | None) -> Any:
    """``SparkSession.builder`` with ``app_name`` and ``master`` (None: the one spark-submit or
    the user's configuration gives), nothing of the pack's own. On a local master the Python
    workers run this interpreter unless ``PYSPARK_PYTHON`` names another (Spark's default,
    ``python3`` on the ``PATH``, may lack the pack).

    Parameters
    ----------
    app_name
        The Spark application's name.
    master
        The master URL; None: the one spark-submit or the user's configuration gives.

    Runs on
    -------
    driver"""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()


def create_topic_fn(bootstrap: str) -> Callable[[str, int], None]:
    """``create_topic(name, partitions)`` that accepts an existing topic (a continued demo).

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers, ``host:port[,...]``.

    Returns
    -------
    callable
        ``create_topic(name, partitions)``, replication factor 1; it raises Kafka's
        ``KafkaException`` for an error other than an existing topic."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    def create_topic(name: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        except Exception as exc:  # noqa: BLE001 - KafkaException carries the code
            code = exc.args[0].code() if exc.args and hasattr(exc.args[0], "code") else None
            if code != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    return create_topic


def run_job(args: argparse.Namespace, opts: Any) -> int:
    """``orderedstream run``: check, start, show progress, restart after transient failures.

    Parameters
    ----------
    args
        The parsed ``run`` arguments (console, progress, metrics file, restarts, trigger).
    opts
        The job's ``JobOptions``.

    Returns
    -------
    int
        0 when the job stopped without an error, 1 when it failed (reported reason first).

    Raises
    ------
    OptionError
        A duration, the topic pattern or an output format that does not fit the output.
    KafkaUnavailableError
        Kafka does not answer before Spark starts.
    LocationError
        A location does not take a probe object.

    Runs on
    -------
    driver"""
    from orderedstream.app.job.figures import FigureTracker
    from orderedstream.app.job.monitor import JobMonitor, ProgressView, batch_rate
    from orderedstream.app.job.pipeline import finish_cleanup, start_job
    from orderedstream.app.job.preflight import check_durations, check_job
    from orderedstream.core.storage import options_for
    from orderedstream.sinks.deltalog import check_no_other_format

    check_durations(trigger=opts.trigger, idle_timeout=opts.idle_timeout)
    topics = check_job(bootstrap=opts.bootstrap, pattern=opts.topic_pattern,
                       locations=_locations(opts), storage_options=opts.storage_options)
    check_no_other_format(opts.output, options_for(opts.output, opts.storage_options),
                          writing=opts.output_format,
                          who=f"--output-format {opts.output_format}")
    console = setup_console(verbose=args.verbose, log_path=args.log_file, announce=False)
    tracker = FigureTracker(args.metrics_file, labels={"query": opts.query_name})
    began = time.monotonic()
    with ProgressView("orderedstream run", every=args.progress_every) as view:
        view.print(f"[job] checked: Kafka answers ({len(topics)} topics match "
                   f"{opts.topic_pattern!r}); output, state and checkpoint are writable")
        if not topics:
            view.print(f"[job] warning: no topic matches {opts.topic_pattern!r} yet"
                       + ("; --available-now finds nothing to process" if args.available_now
                          else "; topics that appear later are read from their start"))
        if console.log_path:
            view.print(f"[job] Spark, py4j and Kafka client logs: {console.log_path}")
        # Signals are recorded from here on: one while the Spark session starts (a KeyboardInterrupt
        # inside pyspark's gateway launch left the driver JVM running) stops the job once the
        # session is up, before a query starts.
        stop = _StopRequest()
        signal.signal(signal.SIGTERM, stop.on_signal)
        signal.signal(signal.SIGINT, stop.on_signal)
        remote = getattr(args, "remote", None)
        view.phase(f"starting Spark session ({remote or args.master or 'local[2,4]'})")
        spark = start_spark("orderedstream-job", args.master, console, remote=remote)
        # the SparkContext set its own SIGINT handler (cancelAllJobs): ours again
        signal.signal(signal.SIGINT, stop.on_signal)
        view.print(f"[job] Spark {spark.version} ready in {time.monotonic() - began:.0f}s")
        error: BaseException | None = None
        while True:
            if stop.signum is not None:
                view.print(f"[job] signal {stop.signum}: stopping before the query starts")
                break
            view.phase("first plan: defining the Kafka source (Python workers start)")
            try:
                query, processor = start_job(spark, opts, once=args.available_now,
                                             on_batch=tracker.on_result)
            except Exception as exc:  # noqa: BLE001 - printed reason first below
                error = exc
                break
            failure: BaseException | None = None
            with JobMonitor(query, opts, view, tracker, from_progress=remote is not None):
                while query.isActive:
                    stop.serve(query, view.print)
                    try:
                        query.awaitTermination(1)
                    except Exception as exc:  # noqa: BLE001 - the query failed: reported
                        failure = exc  # below, once the progress view has stopped
                        break
            error = query.exception() or failure
            finish_cleanup(processor, view.print)
            if (error is None or stop.signum is not None
                    or tracker.figures.restarts >= args.max_restarts or not _transient(error)):
                break
            tracker.restarted()
            view.print(f"[job] the query failed ({_first_line(error)}); restart "
                       f"{tracker.figures.restarts}/{args.max_restarts} from its checkpoint in "
                       f"{RESTART_BACKOFF_S:.0f}s")
            time.sleep(RESTART_BACKOFF_S)
            if stop.signum is not None:  # stopped during the back-off: no new start
                break
        figures = tracker.figures
        view.update({"figures": figures, "lag": None, "rate": batch_rate(figures),
                     "elapsed": time.monotonic() - began}, force=True)
    if error is not None:  # the progress view has stopped: the reason is the next line
        report_failure(error, console)
    print(f"[job] stopped: {figures.batches} batches committed in this run, "
          f"{figures.records:,} records, {figures.restarts} restarts", flush=True)
    stop_session(spark)  # without pyspark's wait for its accumulator server (record 0019)
    return 0 if error is None else 1


class _StopRequest:
    """SIGTERM / Ctrl-C: stop the query after its running batch; a second signal stops it now.

    The handler only records the signal: it runs on the main thread, which is then inside a
    py4j call (``awaitTermination``) on the same connection, and a py4j call from it fails
    ("reentrant call inside BufferedReader"). The main loop, back from ``awaitTermination``
    within a second, calls :meth:`serve`, which stops the query once no trigger is running.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.signals = 0
        self._announced = 0
        self._stopped = False

    def on_signal(self, signum: int, _frame: object) -> None:
        self.signum = signum
        self.signals += 1

    def serve(self, query: Any, say: Callable[[str], None]) -> None:
        if self.signum is None or self._stopped:
            return
        now = self.signals > 1
        if self._announced < self.signals:
            self._announced = self.signals
            say(f"[job] signal {self.signum}: "
                + ("stopping now (the running batch is retried at the next start)" if now
                   else "stopping after the running batch (again to stop now)"))
        if not now:
            try:
                if (query.status or {}).get("isTriggerActive"):
                    return  # a batch is running: ask again in a second
            except Exception:  # noqa: BLE001 - the query may be ending: stop it below
                pass
        self._stopped = True
        try:
            query.stop()
        except Exception as exc:  # noqa: BLE001 - the query ended meanwhile: nothing to stop
            say(f"[job] the query was already ending ({type(exc).__name__})")


def _locations(opts: Any) -> dict[str, str]:
    locations = {"output": opts.output, "state": opts.state_location}
    scheme = opts.checkpoint.split("://", 1)[0] if "://" in opts.checkpoint else "file"
    if scheme in ("file", "s3", "gs", "gcs", "az", "abfs", "memory"):
        locations["checkpoint"] = opts.checkpoint  # others (s3a, hdfs): Spark checks them
    return locations


def _transient(error: BaseException) -> bool:
    """A failure worth a restart: none of the pack's refusals, or Kafka/service unavailable."""
    found = pack_error_in(error)
    return found is None or isinstance(found, (KafkaUnavailableError, ServiceError))


def _first_line(error: BaseException) -> str:
    found = pack_error_in(error)
    if isinstance(found, OrderedStreamError):
        return f"{type(found).__name__}: {str(found).splitlines()[0][:200]}"
    text = first_line(str(error))  # a traceback's own exception, not its opening line
    return text[:300] if text.strip() else type(error).__name__
