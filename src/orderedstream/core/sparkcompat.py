"""What differs between the supported Spark releases (4.0 up to 4.x), in one place.

The pack runs on every Spark 4 release. Spark 4.2 added the Python streaming reader's admission
control (``pyspark.sql.streaming.datasource``: ``ReadLimit``, ``SupportsTriggerAvailableNow``,
``latestOffset(start, limit)``); Spark 4.1 added ``DataSourceStreamArrowWriter``. On an older
release this module gives stand-ins with the same names, so the pack's classes import there,
and :func:`require` refuses a feature that needs the newer release with a sentence naming it.
"""

from __future__ import annotations

import functools
from abc import ABC
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyspark
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

from orderedstream.core.errors import OptionError

if TYPE_CHECKING:  # pyarrow stays out of the processes that only plan (Spark's lookup, load)
    import pyarrow as pa


def _release(text: str) -> tuple[int, int]:
    major, minor = (text.split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


SPARK_RELEASE: tuple[int, int] = _release(pyspark.__version__)
"""The installed pyspark's (major, minor)."""

ADMISSION_CONTROL: bool = SPARK_RELEASE >= (4, 2)
"""Spark calls the stream reader's ``latestOffset(start, limit)``, ``getDefaultReadLimit`` and
``prepareForTriggerAvailableNow`` (4.2+); before, only ``latestOffset()``."""


def require(release: tuple[int, int], feature: str) -> None:
    """Check that the installed Spark is ``release`` or newer, for a feature that needs it.

    Parameters
    ----------
    release
        The oldest (major, minor) release with the feature.
    feature
        How the error names the feature.

    Raises
    ------
    OptionError
        The installed pyspark is older, naming the feature and both releases.

    Runs on
    -------
    driver
    """
    if SPARK_RELEASE < release:
        raise OptionError(f"{feature} needs Spark {release[0]}.{release[1]} or newer; this is "
                          f"pyspark {pyspark.__version__}")


def _arrow_schema_utc() -> Callable[[Any], pa.Schema]:
    """pyspark's ``to_arrow_schema`` with timestamps as UTC microseconds (like Spark's Arrow):
    ``timezone="UTC"`` from Spark 4.1, ``timestamp_utc=True`` on Spark 4.0."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return functools.partial(to_arrow_schema, timezone="UTC")
    return functools.partial(to_arrow_schema, timestamp_utc=True)  # type: ignore[call-arg]


to_arrow_schema_utc: Callable[[Any], pa.Schema] = _arrow_schema_utc()
"""Arrow schema of a Spark StructType, timestamps as UTC microseconds, on every release."""


try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # Spark 4.0

    class DataSourceStreamArrowWriter(  # type: ignore[no-redef,misc]
            DataSourceStreamWriter, DataSourceArrowWriter):
        """Spark 4.0 hands a stream writer that is also a ``DataSourceArrowWriter`` Arrow
        record batches (its write function tests ``isinstance(writer, DataSourceArrowWriter)``
        for batch and streaming writes alike); ``commit``/``abort`` take the batch id."""


try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.0 and 4.1: Spark never passes a limit; these name the default

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in of Spark 4.2's ``ReadLimit``."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in of Spark 4.2's ``ReadAllAvailable``."""

    @dataclass
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in of Spark 4.2's ``ReadMinRows``."""

        min_rows: int

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in of Spark 4.2's ``ReadMaxRows``."""

        max_rows: int

    class SupportsTriggerAvailableNow(ABC):  # type: ignore[no-redef]  # noqa: B024
        """Stand-in of Spark 4.2's mixin (Spark 4.0 and 4.1 never call it)."""


__all__ = ["ADMISSION_CONTROL", "SPARK_RELEASE", "DataSourceStreamArrowWriter", "ReadAllAvailable",
           "ReadLimit", "ReadMaxRows", "ReadMinRows", "SupportsTriggerAvailableNow", "require",
           "to_arrow_schema_utc"]
