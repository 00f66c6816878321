"""The CLI's console: quiet by default (third-party logs to a file), errors shown reason first.

Quiet mode sends everything that is not the pack's own output to one log file:

- Spark's JVM (log4j, including ``ProcessingTimeExecutor`` / ``DAGScheduler`` warnings) and
  every process it starts (Python workers, whose librdkafka clients print ``%4|...|rdkafka#...``
  lines to their stderr) inherit file descriptors 1 and 2 from this process: while quiet, those
  descriptors point at the log file, and Python's ``sys.stdout`` / ``sys.stderr`` write to
  duplicates of the console's. The JVM also gets a log4j2 configuration that writes its log to
  the same file (no "default log4j profile" line).
- librdkafka clients in this process (the demo's producer, the lag consumer) print to fd 2 as
  well, so they land in the file too.
- Python logging: everything at INFO and above to the file (``py4j.clientserver Received
  command`` included); the console gets the pack's own warnings (``orderedstream.*`` at
  WARNING and above).

``--verbose`` keeps today's behaviour: everything on the console.

A failure is reported reason first (:func:`report_failure`): its first line is
``orderedstream: <ErrorClass>: <message>``; quiet, Spark's report (wrappers and traces) goes to
the log file, whose path the next line names; verbose, it follows on the console.
"""

from __future__ import annotations

import io
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from orderedstream.core.errors import error_summary

LOG4J2_TEMPLATE = """\
# Written by orderedstream (quiet console): Spark's log goes to the run's log file.
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""


@dataclass
class ConsoleSetup:
    """What :func:`setup_console` did: ``log_path`` None when verbose."""

    verbose: bool
    log_path: Path | None = None
    log4j_config: Path | None = None

    def java_options(self) -> str:
        """Extra JVM options for a local session's driver: its log4j2 configuration (quiet)."""
        if self.log4j_config is None:
            return ""
        return f"-Dlog4j2.configurationFile=file:{self.log4j_config}"


def default_log_path(workdir: Path | None) -> Path:
    """Where a quiet run's log file goes.

    Parameters
    ----------
    workdir
        The run's work folder; None: the current folder.

    Returns
    -------
    Path
        ``<workdir>/logs/orderedstream.log``, else
        ``./orderedstream-logs/orderedstream-<pid>.log``."""
    if workdir is not None:
        return Path(workdir) / "logs" / "orderedstream.log"
    return Path("orderedstream-logs") / f"orderedstream-{os.getpid()}.log"


def setup_console(*, verbose: bool, log_path: Path | None = None,
                  announce: bool = True) -> ConsoleSetup:
    """Configure logging and, quiet, point file descriptors 1 and 2 at the log file.

    Quiet, it also writes the JVM's log4j2 configuration beside the log file and prints the
    log file's path once.

    Parameters
    ----------
    verbose
        Everything on the console (Python logging at INFO), nothing redirected.
    log_path
        The log file when quiet; None: ``default_log_path(None)``.
    announce
        Print the log file's path.

    Returns
    -------
    ConsoleSetup
        What was set up: the log file and the log4j2 configuration, None when verbose.

    Raises
    ------
    OSError
        The log file or its folder cannot be created."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    if verbose:
        logging.basicConfig(level=logging.INFO, format=fmt._fmt)
        return ConsoleSetup(verbose=True)
    path = (log_path or default_log_path(None)).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    _redirect_native_output(path)
    file_handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    file_handler.setFormatter(fmt)
    root.addHandler(file_handler)
    root.setLevel(logging.INFO)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    # The pack's lines; a failed batch's reason is left to the CLI's own report of it.
    console.addFilter(lambda record: record.name.startswith("orderedstream")
                      and not getattr(record, "orderedstream_failure", False))
    console.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
    root.addHandler(console)
    log4j = path.with_name(path.stem + "-log4j2.properties")
    log4j.write_text(LOG4J2_TEMPLATE.format(path=path, level="info"))
    if announce:
        print(f"[orderedstream] Spark, py4j and Kafka client logs: {path} "
              "(--verbose shows them here)", flush=True)
    return ConsoleSetup(verbose=False, log_path=path, log4j_config=log4j)


def _redirect_native_output(path: Path) -> None:
    """Point fds 1 and 2 at ``path`` (children and native code write there); keep Python's
    ``sys.stdout`` / ``sys.stderr`` on the console through duplicates of the original fds."""
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        keep = os.dup(fd)
        os.set_inheritable(keep, False)
        stream = getattr(sys, name)
        replacement = io.TextIOWrapper(
            io.FileIO(keep, "w", closefd=True), encoding=getattr(stream, "encoding", None)
            or "utf-8", errors="backslashreplace", line_buffering=True,
            write_through=True)
        os.dup2(log_fd, fd)
        setattr(sys, name, replacement)
    os.close(log_fd)


def _exception_text(exc: BaseException) -> str:
    parts = [str(exc)]
    for attr in ("desc", "stackTrace"):  # pyspark's CapturedException
        value = getattr(exc, attr, None)
        if isinstance(value, str) and value not in parts[0]:
            parts.append(value)
    return "\n".join(parts)


def first_line(text: str) -> str:
    """The first line of ``text``, or, where it only opens a Python traceback (py4j's "An
    exception was raised by the Python Proxy ... Traceback"), the exception that ends it.

    Parameters
    ----------
    text
        An exception's text, possibly with a traceback."""
    first = text.strip().splitlines()[0] if text.strip() else text
    if not first.rstrip().endswith("Traceback (most recent call last):"):
        return first
    raised = [m for m in map(_EXCEPTION_LINE.match, text.splitlines()) if m]
    if not raised:
        return first
    return f"{raised[-1].group(1)}: {raised[-1].group(2)} (raised in: {first[:80]}...)"


#: A Python exception line at the end of a traceback: ``module.Name: message``.
_EXCEPTION_LINE = re.compile(r"^(?:[a-z_][\w]*\.)*([A-Z]\w*): (\S.*)$")


def failure_head(exc: BaseException) -> str:
    """The failure's first line: ``orderedstream: <ErrorClass>: <message>`` (the pack's error
    however Spark wrapped it), else ``orderedstream: failed: <Type>: <first line>``.

    Parameters
    ----------
    exc
        The failure, as raised (Spark's wrappers included)."""
    from orderedstream.core.errors import OrderedStreamError

    if isinstance(exc, OrderedStreamError):
        return f"orderedstream: {type(exc).__name__}: {exc}"
    reason = error_summary(exc)
    if reason is not None:
        return f"orderedstream: {reason}"
    return f"orderedstream: failed: {type(exc).__name__}: {first_line(_exception_text(exc))}"


def report_failure(exc: BaseException, console: ConsoleSetup) -> None:
    """Print a failure reason first on stderr (after flushing stdout, so the sentence follows
    the progress lines in a merged stream).

    Parameters
    ----------
    exc
        The failure, as raised.
    console
        The console's setup. Quiet: the full report (Spark's wrappers and traces) is
        appended to the log file and only its path printed; verbose: the report follows.

    Raises
    ------
    OSError
        The log file cannot be appended to."""
    sys.stdout.flush()
    if console.log_path is None:
        sys.stderr.write(error_first(exc))
        sys.stderr.flush()
        return
    with open(console.log_path, "a", encoding="utf-8", errors="backslashreplace") as log:
        log.write(f"\n{time.strftime('%y/%m/%d %H:%M:%S')} ERROR orderedstream: the failure "
                  f"the console reported:\n{error_first(exc)}")
    sys.stderr.write(f"{failure_head(exc)}\n(Spark's full report: {console.log_path}; "
                     "--verbose prints it here)\n")
    sys.stderr.flush()


def error_first(exc: BaseException, *, log_path: Path | None = None) -> str:
    """The text the CLI prints for a failure: the pack's reason first (error class, what was
    wrong, what to do), then Spark's report (its wrappers and traces) or the cause.

    Parameters
    ----------
    exc
        The failure, as raised.
    log_path
        A log file to name after the first line; None: none."""
    from orderedstream.core.errors import OrderedStreamError

    reason = error_summary(exc)
    where = f"\n(full log: {log_path})" if log_path else ""
    if isinstance(exc, OrderedStreamError):
        head = f"orderedstream: {type(exc).__name__}: {exc}"
        cause = (getattr(exc, "spark_error", None) or getattr(exc, "original_cause", None)
                 or exc.__cause__)  # original_cause: core.errors.reason_head
        tail = "" if cause is None else (
            f"\n\n--- cause ---\n{type(cause).__name__}: {_exception_text(cause).strip()}")
        return f"{head}{where}{tail}\n"
    trace = _exception_text(exc).strip()
    if reason is None:
        head = f"orderedstream: failed: {type(exc).__name__}: {first_line(trace)}"
    else:
        head = f"orderedstream: {reason}"
    return f"{head}{where}\n\n--- Spark's report (after the reason above) ---\n{trace}\n"


_KAFKA_DOWN = ("_ALL_BROKERS_DOWN", "_TRANSPORT", "_TIMED_OUT", "_RESOLVE")


def environment_error(exc: BaseException) -> BaseException | None:
    """The pack's error for a failure of the machine's setup rather than of the input: no S3
    credentials, an S3 endpoint that does not answer, Kafka brokers that do not answer (raised
    by botocore / confluent-kafka, possibly wrapped), with what to do; None for other failures.
    Known by class and module name, so neither client is imported here.

    Parameters
    ----------
    exc
        The failure, as raised; its causes and contexts are searched too.

    Returns
    -------
    BaseException or None
        A ``LocationError`` or ``KafkaUnavailableError`` whose cause is the client's error."""
    from orderedstream.core.errors import KafkaUnavailableError, LocationError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name, module = type(current).__name__, type(current).__module__
        text = first_line(str(current))
        if module.startswith("botocore") and name in ("NoCredentialsError",
                                                      "PartialCredentialsError"):
            error: BaseException = LocationError(
                f"no usable S3 credentials ({text}): set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, before reading or writing s3:// URLs "
                "(for the embedded S3, run the 'export AWS_...' line 'orderedstream services' "
                "prints)")
        elif module.startswith("botocore") and name in ("EndpointConnectionError",
                                                        "ConnectTimeoutError"):
            error = LocationError(
                f"the S3 endpoint does not answer ({text}): give --s3-endpoint with the S3 "
                "server's URL (the embedded S3's is printed by 'orderedstream services'); "
                "without it, s3:// URLs go to AWS")
        elif (module.startswith(("cimpl", "confluent_kafka")) and name == "KafkaException"
              and any(code in text for code in _KAFKA_DOWN)):
            error = KafkaUnavailableError(
                f"Kafka does not answer ({text}): check --bootstrap-servers and that the "
                "brokers are up and reachable from here")
        else:
            current = (getattr(current, "original_cause", None) or current.__cause__
                       or current.__context__)
            continue
        error.__cause__ = current
        return error
    return None
