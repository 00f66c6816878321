"""pyarrow without pandas until something really imports pandas.

``pa.array(list)``, ``RecordBatch.from_pylist`` and ``pa.scalar`` first ask pyarrow's pandas shim
whether the object is a pandas object, and the shim answers by importing pandas (its memory in
every process) and caching that it has it. In a process that has not imported pandas no object
can be a pandas object, so the pack's workers and driver paid that memory for nothing
(docs/decisions/0014-no-pandas-import.md).

:func:`keep_pandas_lazy` makes the shim's answer "pandas is loaded in this process" instead of
"pandas is installed": it primes the shim with "no pandas" while only its own thread is refused
pandas, and installs an import hook that, once anything imports pandas later (a user function,
a pandas UDF, ``to_pandas``), completes that import and then switches the shim to pandas. From
then on pyarrow behaves exactly as before: ``pa.array(series)``, ``pa.table(df)`` and
``to_pandas`` see pandas. pyarrow's C++ converter already follows the same rule ("if pandas has
been imported already", ``python_to_arrow.cc``).

The hook changes the whole process's imports, so it is installed only with
``ORDEREDSTREAM_PROCESS_TUNING=1`` (``orderedstream.core.tuning``); there
``ORDEREDSTREAM_LAZY_PANDAS=0`` turns it off again (and the embedded session's light
converters, ``orderedstream.dev.embedded_session``), for side-by-side measurements.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
import threading
from types import ModuleType
from typing import Any

from orderedstream.core.tuning import process_tuning

log = logging.getLogger(__name__)

_lock = threading.Lock()


def enabled() -> bool:
    """Whether pandas is kept lazy: ``ORDEREDSTREAM_PROCESS_TUNING=1`` and not
    ``ORDEREDSTREAM_LAZY_PANDAS=0`` (otherwise pyarrow and PySpark as they come)."""
    return process_tuning() and os.environ.get("ORDEREDSTREAM_LAZY_PANDAS", "1") != "0"


def pyarrow_has_pandas() -> bool:
    """Whether pyarrow's pandas shim has pandas (False before pyarrow tried to import it)."""
    lib = sys.modules.get("pyarrow.lib")
    shim = getattr(lib, "_pandas_api", None)
    # the shim's own flags are C-level; ``_pd`` (a readonly attribute) is set once it has pandas
    return shim is not None and getattr(shim, "_pd", None) is not None


class _PandasLoader(importlib.abc.Loader):
    """The real loader of ``pandas``, then tells pyarrow's shim that pandas is there."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _tell_pyarrow()

    def __getattr__(self, name: str) -> Any:  # resource readers and the like
        return getattr(self._loader, name)


class _PandasHook(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: refuses ``pandas`` to the thread priming pyarrow's shim,
    and wraps the loader of every other import of ``pandas``."""

    def __init__(self) -> None:
        self.priming: int | None = None

    def find_spec(self, fullname: str, path: Any = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "pandas":
            return None
        if self.priming == threading.get_ident():
            raise ModuleNotFoundError("pandas is not imported in this process yet", name=fullname)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _PandasLoader):
                    spec.loader = _PandasLoader(spec.loader)
                return spec  # type: ignore[no-any-return]
        return None


_hook: _PandasHook | None = None


def _tell_pyarrow() -> None:
    lib = sys.modules.get("pyarrow.lib")
    if lib is None:
        return
    try:
        lib._pandas_api.pd  # noqa: B018 - the property imports pandas into the shim
    except Exception:  # an unusable pandas: pyarrow's shim warns or raises on its own later
        log.debug("pyarrow's pandas shim did not take pandas", exc_info=True)


def keep_pandas_lazy() -> bool:
    """Prime pyarrow's pandas shim in this process so building Arrow arrays from Python objects
    does not import pandas; True when pandas stays unloaded. Idempotent and cheap after the
    first call; does nothing once pandas is imported."""
    global _hook
    if "pandas" in sys.modules or not enabled():
        return False
    if _hook is not None:
        return True
    with _lock:
        if _hook is None:
            import pyarrow as pa

            hook = _PandasHook()
            sys.meta_path.insert(0, hook)
            hook.priming = threading.get_ident()
            try:
                pa.array([])  # the shim tries pandas once, is refused, and caches "no pandas"
            finally:
                hook.priming = None
            _hook = hook
            if "pandas" in sys.modules:  # another thread imported it meanwhile
                _tell_pyarrow()
    return "pandas" not in sys.modules
