"""What a replay needs to rebuild a batch's user function and stage options, kept in the
batch's commit record (``extra["ordered_state"]["replay"]``), and how it is read back.

The function's *code* is the one importable at replay time: replaying with the code of the
run means running the same checkout or version of the job.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from orderedstream.core.errors import OptionError
from orderedstream.sinks.schema import encode_schema
from orderedstream.statestore.ordered.options import OrderedOptions
from orderedstream.statestore.ordered.timeouts import (
    EventTimeTimeout,
    NoTimeout,
    ProcessingTimeTimeout,
    Timeout,
)


def _qualified(obj: Any) -> str | None:
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None)
    if not module or not name or "<" in name or module == "__main__":
        return None
    return f"{module}:{name}"


def function_spec(func: Any) -> dict[str, Any]:
    """How to re-create ``func`` in another process, or why it cannot be.

    A function is re-creatable when it is a module-level function, or an instance of a
    module-level dataclass whose fields are JSON values (the parameters it ran with); a lambda
    or a closure is recorded as ``"function": null`` with the reason, and a replay then needs
    ``--function``.

    Parameters
    ----------
    func
        The stage's user function.

    Returns
    -------
    dict[str, Any]
        ``{"function": "module:qualname", "params": {...}}`` or ``{"function": None, "why":
        ...}``; plus ``key_columns`` from the function's ``output_key_columns`` attribute,
        if any (the output columns a replay groups its diff by).

    Runs on
    -------
    driver"""
    spec = _function_spec(func)
    keys = getattr(func, "output_key_columns", None)
    if keys:
        spec["key_columns"] = [keys] if isinstance(keys, str) else [str(k) for k in keys]
    return spec


def _function_spec(func: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(func) and not isinstance(func, type):
        name = _qualified(type(func))
        params = {f.name: getattr(func, f.name) for f in dataclasses.fields(func) if f.init}
        try:
            json.dumps(params)
        except (TypeError, ValueError):
            return {"function": None, "why": f"{type(func).__name__}'s fields are not JSON"}
        if name is None:
            return {"function": None, "why": f"{type(func).__name__} is not module-level"}
        return {"function": name, "params": params}
    name = _qualified(func)
    if name is None or not callable(func) or not hasattr(func, "__code__"):
        return {"function": None,
                "why": f"{func!r} is not a module-level function or dataclass instance"}
    return {"function": name}


def timeout_spec(timeout: Timeout) -> dict[str, Any]:
    """A timeout mode as JSON (:func:`timeout_from_spec` reads it back).

    Parameters
    ----------
    timeout
        ``NoTimeout``, ``ProcessingTimeTimeout`` or ``EventTimeTimeout``.

    Returns
    -------
    dict[str, Any]
        ``{"kind": "none" | "processing" | "event", ...}`` with its milliseconds and column.

    Runs on
    -------
    driver"""
    if isinstance(timeout, ProcessingTimeTimeout):
        return {"kind": "processing", "default_ms": timeout.default_ms}
    if isinstance(timeout, EventTimeTimeout):
        return {"kind": "event", "delay_ms": timeout.delay_ms, "column": timeout.column}
    return {"kind": "none"}


def timeout_from_spec(spec: Mapping[str, Any] | None) -> Timeout:
    """The timeout mode of :func:`timeout_spec`'s JSON.

    Parameters
    ----------
    spec
        The recorded timeout, or ``None`` (no timeout).

    Returns
    -------
    Timeout
        The mode; an unknown kind gives ``NoTimeout()``.

    Raises
    ------
    OptionError
        The recorded values do not make a valid timeout.

    Runs on
    -------
    driver"""
    kind = (spec or {}).get("kind", "none")
    if kind == "processing":
        default = spec.get("default_ms") if spec else None
        return ProcessingTimeTimeout(None if default is None else int(default))
    if kind == "event":
        assert spec is not None
        return EventTimeTimeout(int(spec.get("delay_ms") or 0), str(spec.get("column")))
    return NoTimeout()


def replay_spec(options: OrderedOptions, func: Any) -> dict[str, Any]:
    """The ``replay`` section of a batch's commit record (small JSON), e.g.::

        {"function": "mypackage.logic:SessionLogic", "params": {"idle_timeout": "10 minutes"},
         "options": {"key": "key", "columns": [...], "timeout": {"kind": "processing", ...},
                     "max_cached_keys": ..., "output_batch_rows": ...,
                     "output_schema": "<base64 Arrow IPC>", "partition_by": [...]}}

    Parameters
    ----------
    options
        The stage's options.
    func
        The stage's user function (:func:`function_spec`).

    Returns
    -------
    dict[str, Any]
        The section.

    Runs on
    -------
    driver"""
    partition_by = options.writer_options.get("partitionBy") or ()
    return {**function_spec(func), "options": {
        "key": options.key, "columns": None if options.columns is None else list(options.columns),
        "timeout": timeout_spec(options.timeout), "max_cached_keys": options.max_cached_keys,
        "output_batch_rows": options.output_batch_rows,
        "output_schema": encode_schema(options.output_schema),
        "partition_by": [partition_by] if isinstance(partition_by, str) else list(partition_by)}}


def load_function(text: str) -> Callable[..., Any]:
    """The callable ``MODULE:ATTR`` names (ATTR may be dotted); a class is instantiated with
    no arguments (its defaults).

    Parameters
    ----------
    text
        ``MODULE:ATTR``, e.g. ``mypackage.logic:update_session``.

    Returns
    -------
    Callable[..., Any]
        The function, or the instance of the class.

    Raises
    ------
    OptionError
        Not ``MODULE:ATTR``, the module does not import, it has no such attribute, or the
        result is not callable.

    Runs on
    -------
    driver"""
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name or not attr:
        raise OptionError(f"--function {text!r}: MODULE:ATTR is required, e.g. "
                          "mypackage.logic:update_session")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise OptionError(f"--function {text!r}: cannot import module {module_name!r} ({exc}); "
                          "it must be importable from the current Python path") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise OptionError(f"--function {text!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type):
        obj = obj()
    if not callable(obj):
        raise OptionError(f"--function {text!r} is {type(obj).__name__}, not callable: a "
                          "function (key, record, state) -> rows, or a class building one")
    return obj  # type: ignore[no-any-return]


def function_from_spec(spec: Mapping[str, Any]) -> Callable[..., Any]:
    """The function a batch ran with, re-created from its commit record's ``replay`` section.

    Parameters
    ----------
    spec
        The section (:func:`replay_spec`).

    Returns
    -------
    Callable[..., Any]
        The module-level function, or the dataclass built with its recorded ``params``.

    Raises
    ------
    OptionError
        The function was not recorded (the reason is given; pass ``--function``).
    ImportError, AttributeError
        The recorded module or attribute no longer exists in the code importable now.

    Runs on
    -------
    driver"""
    name = spec.get("function")
    if not name:
        why = spec.get("why") or ("the batch was committed before replay information was "
                                  "recorded")
        raise OptionError(f"the batch's user function cannot be re-created ({why}); pass "
                          "--function MODULE:ATTR (Python API: function=...)")
    module_name, _, attr = str(name).partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    params = spec.get("params")
    if params is not None:
        return obj(**params)  # type: ignore[no-any-return]
    return obj  # type: ignore[no-any-return]


__all__ = ["function_from_spec", "function_spec", "load_function", "replay_spec",
           "timeout_from_spec", "timeout_spec"]
