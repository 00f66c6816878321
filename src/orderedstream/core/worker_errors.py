"""The pack's reason first in errors Spark reports from a Python worker.

Spark wraps an exception raised in a Python Data Source hook (``schema()`` at ``load()``, the
reader constructors, offset planning, ``read`` on executors) as
``[PYTHON_DATA_SOURCE_ERROR] ...: Traceback ...`` followed by every frame of ours, each with
its long file path, so the pack's sentence used to start hundreds of characters in.
``reason_first_in_worker`` re-raises the pack's own errors from ONE frame whose file name is
short, with no source line and no chained context: the sentence then starts right after
Spark's prefix. Other exceptions pass through untouched, with their full traceback.

``reason_first_in_callback`` does the same for a ``foreachBatch`` function (driver side):
Spark quotes the callback's whole printed trace after its prefix (``[STREAM_FAILED] ...
[FOREACH_BATCH_USER_FUNCTION_ERROR] ... Return Message:``), where the pack's sentence came
last, after every frame and chained cause. The pack's errors leave the callback headed by
their own sentence (``core.errors.reason_head``), frames kept after it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from orderedstream.core.errors import (
    OrderedStreamError,
    pack_error_in,
    raise_reason_first,
    reason_head,
    user_function_error_in,
)

F = TypeVar("F", bound=Callable[..., Any])

# Compiled under a short pseudo file name: the one frame a re-raised pack error carries.
_WRAPPER = compile(
    "def hook(*args, **kwargs):\n"
    "    try:\n"
    "        return func(*args, **kwargs)\n"
    "    except OrderedStreamError as exc:\n"
    "        raise exc.with_traceback(None) from None\n",
    "<orderedstream>", "exec")
# The same for a hook that returns an iterator (``read``): its errors come while Spark iterates.
_ITER_WRAPPER = compile(
    "def hook(*args, **kwargs):\n"
    "    try:\n"
    "        yield from func(*args, **kwargs)\n"
    "    except OrderedStreamError as exc:\n"
    "        raise exc.with_traceback(None) from None\n",
    "<orderedstream>", "exec")


def reason_first_in_worker(func: F) -> F:
    """Wrap a Data Source hook so the pack's errors reach Spark's message with one short frame
    (see the module docstring); the hook's name and docstring are kept.

    Parameters
    ----------
    func
        The hook (``schema``, a reader's constructor, offset planning, ...).

    Returns
    -------
    Callable
        The wrapped hook.

    Raises
    ------
    OrderedStreamError
        When the hook raises one: the same object, its traceback cut and context dropped.

    Runs on
    -------
    both (Spark's planner processes and the executors' workers)
    """
    return _wrapped(_WRAPPER, func)


def reason_first_in_worker_iter(func: F) -> F:
    """``reason_first_in_worker`` for a hook returning an iterator (``read``): the wrapper iterates
    it, so errors raised while Spark consumes the batches are covered too.

    Parameters
    ----------
    func
        The hook returning an iterator.

    Returns
    -------
    Callable
        The wrapped hook, a generator function.

    Raises
    ------
    OrderedStreamError
        When the hook or its iterator raises one: the same object, traceback cut.

    Runs on
    -------
    executor
    """
    return _wrapped(_ITER_WRAPPER, func)


def reason_first_in_callback(func: F) -> F:
    """Wrap a ``foreachBatch`` function (or a method used as one) so the pack's reason comes
    right after Spark's prefix in the ``StreamingQueryException`` the user's query raises.

    A pack error it raises is headed by its sentence
    (:func:`orderedstream.core.errors.reason_head`); Spark's error carrying one (a task's
    failure) is re-raised as it (``raise_reason_first``). The name and docstring are kept.

    Parameters
    ----------
    func
        The ``foreachBatch`` function.

    Returns
    -------
    Callable
        The wrapped function.

    Raises
    ------
    OrderedStreamError
        The pack's error ``func`` raised or Spark's error carried, arranged as above; other
        exceptions pass unchanged.

    Runs on
    -------
    driver
    """

    @functools.wraps(func)
    def callback(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except OrderedStreamError as exc:
            raise reason_head(exc)  # noqa: B904 - the head is set as the cause
        except Exception as exc:  # Spark's error for the pack's code on executors
            if pack_error_in(exc) is None and user_function_error_in(exc) is None:
                raise
            raise_reason_first(exc, f"in {func.__qualname__}")

    return callback  # type: ignore[return-value]


def _wrapped(code: Any, func: F) -> F:
    namespace: dict[str, Any] = {"func": func, "OrderedStreamError": OrderedStreamError}
    exec(code, namespace)  # noqa: S102 - a fixed, module-level code object
    return functools.wraps(func)(namespace["hook"])  # type: ignore[return-value]


__all__ = ["reason_first_in_callback", "reason_first_in_worker", "reason_first_in_worker_iter"]
