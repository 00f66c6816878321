"""The pack's exceptions: one root, one subclass per kind of failure.

Messages name what was involved (topic, partition, offset, path, option) and what to do.
"""

from __future__ import annotations

import logging
import re
from typing import NoReturn


class OrderedStreamError(Exception):
    """Root of every error this pack raises on purpose."""


class OptionError(OrderedStreamError, ValueError):
    """An option is unknown, malformed, or conflicts with another option."""


class DataLossError(OrderedStreamError):
    """Kafka records that should have been read are gone (retention, topic recreated, ...)."""


class ServiceError(OrderedStreamError):
    """A local service (Kafka broker, S3 server, Spark cluster) failed to start or answer."""


class CommitConflictError(OrderedStreamError):
    """Another writer committed first, or this writer's epoch was superseded (fenced)."""


class FencedError(CommitConflictError):
    """A writer from an older epoch tried to commit; a newer run owns the output."""


class CorruptStateError(OrderedStreamError):
    """A state snapshot file is missing or fails its checksum."""


class SchemaMismatchError(OrderedStreamError, ValueError):
    """A batch's schema cannot be appended to the table's schema."""


class StateLockedError(OrderedStreamError):
    """A local RocksDB state copy is held by another process (one process per copy)."""


class StateNotFoundError(OrderedStreamError):
    """A state version that was asked for was never published at that location."""


class StateTransactionError(OrderedStreamError):
    """A state partition was used out of order (write after prepare, commit of a closed one)."""


class KafkaUnavailableError(OrderedStreamError):
    """The Kafka cluster did not answer within the source's bounded retry time."""


class OrderViolationError(OrderedStreamError):
    """Rows of a Kafka partition reached the ordered stage out of offset order, twice, or split."""


class ShimBuildError(OrderedStreamError):
    """The JVM shim (jvm-shim/) could not be built: Maven missing, or its build failed."""


class PlacementError(OrderedStreamError, ValueError):
    """A placement request names a partition the DataFrame lacks, or a state key is empty."""


class CorruptLogError(OrderedStreamError):
    """A commit record (or a derived Spark log file) is unreadable, vanished, or malformed."""


class UnsupportedFormatError(OrderedStreamError):
    """Stored data is in a format this version cannot read (written by a newer version)."""


class UnsupportedStorageError(OrderedStreamError):
    """A filesystem cannot do what fencing needs (exclusive create, compare-and-swap)."""


class TableIntegrityError(OrderedStreamError):
    """A table's files disagree with its commit log (a file missing, rows lost in a rewrite)."""


class StateValueError(OrderedStreamError, ValueError):
    """A state key or value cannot be stored: wrong type, or not what the codec accepts."""


class UserFunctionError(OrderedStreamError):
    """The user's function returned something that is not rows of the output schema."""


class InvariantError(OrderedStreamError):
    """An internal invariant of the pack does not hold: a bug, reported with what was seen."""


class KafkaAuthenticationError(OrderedStreamError):
    """The Kafka cluster refused the client's login (SASL or TLS credentials)."""


class StateKeyError(OrderedStreamError, KeyError):
    """A key's state was read where it has none (``GroupState.get`` without ``exists``)."""


def _pack_error_classes() -> dict[str, type[OrderedStreamError]]:
    return {name: obj for name, obj in globals().items()
            if isinstance(obj, type) and issubclass(obj, OrderedStreamError)}


def _error_line_pattern() -> re.Pattern[str]:
    names = sorted(_pack_error_classes(), key=len, reverse=True)
    return re.compile(r"(?:orderedstream\.core\.errors\.)?\b(" + "|".join(names) + r"): (.+)")


def _exception_texts(exc: BaseException) -> list[str]:
    texts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts.append(str(current))
        for attr in ("desc", "stackTrace"):  # pyspark's CapturedException
            value = getattr(current, attr, None)
            if isinstance(value, str):
                texts.append(value)
        current = current.__cause__ or current.__context__
    return texts


def pack_error_in(exc: BaseException) -> OrderedStreamError | None:
    """Find the pack's error inside ``exc``, however Spark wrapped it (``[STREAM_FAILED]``,
    ``[FOREACH_BATCH_USER_FUNCTION_ERROR]``, a Python worker's trace in a ``PythonException``).

    Parameters
    ----------
    exc
        The exception to search, with its causes and contexts.

    Returns
    -------
    OrderedStreamError or None
        The exception object when it is in the chain; else one rebuilt from the innermost
        ``ErrorClass: message`` line of the traces (where it was raised); None when there is none.

    Runs on
    -------
    driver (where Spark's errors arrive); works anywhere
    """
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OrderedStreamError):
            return current
        current = current.__cause__ or current.__context__
    found = None
    pattern = _error_line_pattern()
    for text in _exception_texts(exc):
        for match in pattern.finditer(text):
            found = (match.group(1), match.group(2).strip())
    if found is None:
        return None
    cls = _pack_error_classes()[found[0]]
    message = found[1]
    if issubclass(cls, KeyError) and len(message) > 1 and message[0] == message[-1] == "'":
        message = message[1:-1]  # str(KeyError) quotes its argument
    return cls(message)


def error_summary(exc: BaseException) -> str | None:
    """``ErrorClass: first line of its message`` for the pack's error in ``exc``.

    Parameters
    ----------
    exc
        The exception to search (see :func:`pack_error_in`).

    Returns
    -------
    str or None
        The summary line, or None when ``exc`` carries no pack error.

    Runs on
    -------
    driver
    """
    found = pack_error_in(exc)
    if found is None:
        return None
    text = found.args[0] if isinstance(found, KeyError) and found.args else str(found)
    lines = str(text).strip().splitlines()
    return f"{type(found).__name__}: {lines[0] if lines else ''}"


USER_FUNCTION_NOTE = "in the ordered user function"
"""How the note added to an exception the user's function raised begins (executor side):
``... at Kafka t/0 offset 7, key b'k' (batch 3)`` or ``...'s timeout call for key ...``."""


def user_function_error_in(exc: BaseException) -> str | None:
    """Find an error the user's function raised on an executor, in the worker's trace that Spark
    quotes (the exception line, then the note the stage added). The exception's own type does
    not cross Spark; its name and message do.

    Parameters
    ----------
    exc
        The exception Spark raised, searched with its causes and contexts.

    Returns
    -------
    str or None
        ``<Type>: <message> (raised in the ordered user function at Kafka ...)`` for the
        innermost such error, None when there is none.

    Runs on
    -------
    driver
    """
    note = re.compile(r"^" + re.escape(USER_FUNCTION_NOTE) + r"(.*)$", re.MULTILINE)
    found = None
    for text in _exception_texts(exc):
        for match in note.finditer(text):
            lines = text[:match.start()].rstrip("\n").splitlines()
            message: list[str] = []
            while lines and lines[-1] and not lines[-1].startswith((" ", "Traceback")):
                message.insert(0, lines.pop())
            if message:
                found = f"{message[0]} (raised {USER_FUNCTION_NOTE}{match.group(1).rstrip()})"
    return found


def reason_first(exc: BaseException, where: str) -> BaseException:
    """What to raise for a failure of Spark work that ran the pack's code, so that the pack's
    sentence comes before Spark's wrappers. Use as ``raise reason_first(exc, "...") from exc``.

    Parameters
    ----------
    exc
        The exception caught around the Spark work.
    where
        What was running, added to the message (e.g. ``"batch 3 of the ordered stage"``).

    Returns
    -------
    BaseException
        ``exc`` itself when it is the pack's error; a new error of the pack error's class (its
        message, then ``where``) when ``exc`` carries one; a ``UserFunctionError`` when it
        carries the user's function's error; ``exc`` otherwise.

    Runs on
    -------
    driver
    """
    if isinstance(exc, OrderedStreamError):
        return exc
    found = pack_error_in(exc)
    if found is None:
        raised = user_function_error_in(exc)
        return exc if raised is None else UserFunctionError(
            f"{raised} ({where}; Spark's report follows)")
    text = found.args[0] if isinstance(found, KeyError) and found.args else str(found)
    return type(found)(f"{text} ({where}; Spark's report follows)")


def raise_reason_first(exc: BaseException, where: str) -> NoReturn:
    """Raise :func:`reason_first`'s error for ``exc`` (call inside ``except``), arranged so a
    printed trace starts with the pack's sentence.

    Its cause is the error as raised where it happened (message only, no frames: Python prints a
    cause first), Spark's exception is its context and ``spark_error``, and Spark's report is a
    note after the message. This matters in ``foreachBatch``, whose Spark report quotes the Python
    trace: a cause's trace printed first buried the sentence deep in it.

    Parameters
    ----------
    exc
        The exception caught around the Spark work.
    where
        What was running, added to the message.

    Raises
    ------
    BaseException
        Always: the arranged pack error, or ``exc`` itself when it carries none.

    Runs on
    -------
    driver
    """
    first = reason_first(exc, where)
    if first is exc:
        raise exc
    origin = pack_error_in(exc)
    text = str(origin) if origin is not None else str(first)
    if isinstance(origin, KeyError) and origin.args:
        text = str(origin.args[0])
    head = type(first)(text)
    first.spark_error = exc  # type: ignore[attr-defined]
    first.add_note(f"Spark's report:\n{_spark_report(exc)}")
    raise first from head


def reason_head(exc: OrderedStreamError) -> OrderedStreamError:
    """Arrange ``exc`` so a printed trace (``traceback.format_exc``, which Spark quotes for a
    ``foreachBatch`` callback's error) starts with its sentence.

    Its cause becomes a copy of it with the message only (no frames: Python prints a cause
    first); what caused it before (a botocore error, Spark's trace) becomes a note after the
    message, its first line only, and is kept as ``original_cause``. An error already arranged
    (by :func:`raise_reason_first`) is left as it is.

    Parameters
    ----------
    exc
        The pack's error to arrange, changed in place.

    Returns
    -------
    OrderedStreamError
        ``exc``.

    Runs on
    -------
    both
    """
    cause = exc.__cause__
    if isinstance(cause, OrderedStreamError) and cause.__traceback__ is None:
        return exc  # already headed
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    try:
        head: BaseException = type(exc)(text)
    except Exception:  # noqa: BLE001 - a subclass with another constructor
        head = OrderedStreamError(f"{type(exc).__name__}: {text}")
    before = cause if cause is not None else (
        None if exc.__suppress_context__ else exc.__context__)
    if before is not None:
        lines = str(before).strip().splitlines()
        exc.add_note(f"(caused by {type(before).__name__}: {lines[0][:300] if lines else ''})")
        exc.original_cause = before  # type: ignore[attr-defined]
    exc.__cause__ = head
    exc.__suppress_context__ = True
    return exc


def _spark_report(exc: BaseException) -> str:
    desc = getattr(exc, "desc", None)
    return (desc if isinstance(desc, str) and desc else str(exc)).strip()


def log_failure(logger: logging.Logger, exc: BaseException) -> None:
    """Log one ERROR line ``orderedstream: <Class>: <first line>`` for the pack's error in ``exc``,
    where a query's batch fails, before Spark prints its report (a script without logging set up
    shows it on stderr through Python's last-resort handler). Records carry
    ``orderedstream_failure`` so a CLI that reports the failure itself can leave them out.

    Parameters
    ----------
    logger
        The logger to write to.
    exc
        The failure; nothing is logged when it carries no pack error.

    Runs on
    -------
    driver
    """
    summary = error_summary(exc)
    if summary is not None:
        logger.error("orderedstream: %s", summary, extra={"orderedstream_failure": True})


class LocationError(OrderedStreamError):
    """A state, output or checkpoint location cannot be written: a missing bucket, denied
    access, an unreachable endpoint. The message names the URL."""
