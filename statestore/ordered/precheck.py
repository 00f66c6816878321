"""What ``OrderedStateful`` can check before a query starts (driver side).

At construction the function pickles and the buckets exist; at ``apply(df)`` and each batch
the input has the columns the stage reads. Every error is ``OptionError`` or
``LocationError`` naming what was wrong and what to do.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from orderedstream.core.errors import OptionError, OrderedStreamError
from orderedstream.core.location import open_location
from orderedstream.core.storage import is_local_url, options_for
from orderedstream.python_datasource.ranges import is_range_columns
from orderedstream.statestore.ordered.options import OrderedOptions

_log = logging.getLogger("orderedstream.statestore.ordered")


def check_picklable(func: Any) -> None:
    """Refuse a user function that cannot be pickled, before the first batch.

    Spark ships the function to the executors with cloudpickle; a function capturing a lock,
    a client or the SparkSession would otherwise fail only in the first batch, deep in
    Spark's report.

    Parameters
    ----------
    func
        The user function (a function or a callable object).

    Raises
    ------
    OptionError
        ``func`` does not pickle: names what it captures that does not, and how to avoid it.

    Runs on
    -------
    driver"""
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(func)
    except Exception as exc:  # noqa: BLE001 - pickling fails in many types
        culprits = _unpicklable_captures(func, cloudpickle)
        named = f" ({', '.join(culprits)})" if culprits else ""
        raise OptionError(
            f"OrderedStateful(func={_name(func)}) cannot be pickled, which Spark needs to run "
            f"it on the executors: {type(exc).__name__}: {_first_line(exc)}. It captures "
            f"something that cannot travel{named}: create it inside the function (or "
            "lazily, once per executor process), or give a class whose __getstate__ leaves "
            "it out") from None


def check_buckets(options: OrderedOptions) -> None:
    """Refuse a state or output bucket that does not exist, before the first batch.

    One HEAD per bucket and endpoint, through the filesystem the driver uses anyway
    (``core.location.open_location``); local paths are not checked. Other failures
    (connection refused, no credentials here) are left to the batches: a Spark Connect
    client may not reach the object store its server writes to.

    Parameters
    ----------
    options
        The stage's options (``state_location``, ``output``, ``storage_options``).

    Raises
    ------
    LocationError
        A bucket does not exist or its S3 endpoint does not answer, naming the URL.

    Runs on
    -------
    driver"""
    seen: set[tuple[str, str]] = set()
    for what, url in (("ordered state", options.state_location),
                      ("ordered output", options.output)):
        if is_local_url(url):
            continue
        storage = options_for(url, options.storage_options)
        bucket = url.split("://", 1)[-1].split("/", 1)[0]
        endpoint = str((storage.get("client_kwargs") or {}).get("endpoint_url"))
        if (bucket, endpoint) in seen:
            continue
        seen.add((bucket, endpoint))
        try:
            open_location(url, what, storage)
        except OrderedStreamError:
            raise
        except Exception as exc:  # noqa: BLE001 - left to the batches (see above)
            _log.debug("%s location %s not checked: %s", what, url, exc)


def check_input_columns(options: OrderedOptions, columns: Sequence[str]) -> None:
    """Refuse an input that lacks a column the stage reads (``OrderedOptions.check_input``).

    With ``emit=ranges`` rows the records' columns are checked instead: ``orderedkafka``'s
    schema with headers, known before any record is read (without ``includeHeaders`` the
    tasks refuse ``headers`` themselves).

    Parameters
    ----------
    options
        The stage's options.
    columns
        The input DataFrame's column names.

    Raises
    ------
    OptionError
        A required column is missing, naming the option that asks for it.

    Runs on
    -------
    driver"""
    names = list(columns)
    if is_range_columns(names):
        from orderedstream.python_datasource.source import kafka_schema

        names = list(kafka_schema(include_headers=True).names)
    options.check_input(names)


def _unpicklable_captures(func: Any, cloudpickle: Any) -> list[str]:
    """``'name', a module.Type`` of what ``func`` captures that does not pickle."""
    target = func if inspect.isfunction(func) else getattr(func, "__call__", None)  # noqa: B004
    target = getattr(target, "__func__", target)
    found: list[str] = []
    try:
        captured = inspect.getclosurevars(target) if inspect.isfunction(target) else None
    except (TypeError, ValueError):
        captured = None
    values: dict[str, Any] = {}
    if captured is not None:
        values.update(captured.nonlocals)
        values.update(captured.globals)
    if not inspect.isfunction(func):
        values.update(getattr(func, "__dict__", {}))
    for name, value in values.items():
        if inspect.ismodule(value):
            continue
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001, S112 - we look for the ones that fail
            kind = type(value)
            found.append(f"{name!r}, a {kind.__module__}.{kind.__qualname__}")
    return found


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or type(func).__name__


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else "(no message)"


__all__ = ["check_buckets", "check_input_columns", "check_picklable"]
