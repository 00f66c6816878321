"""The pack's ``pyspark_*`` registration modules: a name for Spark's lookup, the source later.

Spark finds static Python Data Sources by importing every top-level ``pyspark_*`` module in a
fresh planner process, the first time a session resolves a format that is not a JVM one, and
pickles each ``DefaultSource`` class by reference. Only ``name()`` is asked there. Importing the
pack's real sources at that point imported pyarrow, fsspec and the libraries into that process
for nothing, on the path from ``load()`` to the query's start
(docs/decisions/0009-lazy-data-source-registrations.md). :class:`LazyDataSource` answers
``name()`` alone and imports its target only when Spark makes an instance
(``create_data_source`` at ``load()``), returning the target's own instance: what Spark
pickles from there on is the real source.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource

from orderedstream.core.worker_errors import reason_first_in_worker


def _new_target(cls: type[LazyDataSource], options: dict[str, str]) -> Any:
    return cls.target_class()(options=options)


class LazyDataSource(DataSource):
    """A registration class: ``name()`` without imports; an instance is ``target``'s instance.

    Subclasses set :attr:`target` (``"module:Class"``, a ``DataSource``) and a ``name()``
    classmethod equal to the target's (Spark calls it before anything is imported).
    """

    target: ClassVar[str] = ""

    # The target's instance; a pack error it raises (a misspelled option) reaches Spark's
    # message with one short frame (core.worker_errors), not this module's.
    __new__ = reason_first_in_worker(_new_target)  # type: ignore[assignment]

    @classmethod
    def target_class(cls) -> type[DataSource]:
        """The real Data Source class, imported now."""
        module, _, name = cls.target.partition(":")
        found = getattr(importlib.import_module(module), name)
        if not (isinstance(found, type) and issubclass(found, DataSource)):
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}.target {cls.target!r} is not "
                            "a pyspark.sql.datasource.DataSource subclass")
        return found


__all__ = ["LazyDataSource"]
