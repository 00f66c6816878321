"""``OrderedOptions``: everything the ordered stage needs, validated once, frozen, picklable.

Built on the driver by ``OrderedStateful`` and shipped (pickled) to every task; keyword-only.
``to_arrow_schema`` turns the user's ``output_schema`` (Arrow, Spark or DDL) into Arrow.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from orderedstream.core.errors import OptionError
from orderedstream.core.location import check_location
from orderedstream.core.storage import options_for
from orderedstream.sinks.schema import spark_to_arrow
from orderedstream.statestore.ordered.placement import PLACEMENT_MODES
from orderedstream.statestore.ordered.timeouts import (
    EventTimeTimeout,
    NoTimeout,
    ProcessingTimeTimeout,
    Timeout,
)

KAFKA_COLUMNS = ("topic", "partition", "offset")


def to_arrow_schema(schema: Any) -> pa.Schema:
    """An Arrow schema from a pyarrow Schema, a Spark StructType or a DDL string.

    Parameters
    ----------
    schema
        The user's ``output_schema``; a DDL string needs an active SparkSession to parse.

    Returns
    -------
    pa.Schema
        The schema itself, or its Arrow equivalent.

    Raises
    ------
    OptionError
        The DDL string does not parse, or ``schema`` is of another type.

    Runs on
    -------
    driver"""
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str):
        from pyspark.sql.types import DataType

        try:
            schema = DataType.fromDDL(schema)
        except Exception as exc:  # noqa: BLE001 - pyspark raises several kinds
            raise OptionError(f"output_schema {schema!r} could not be parsed as a DDL schema "
                              "('name type, ...'; DDL strings need an active SparkSession, "
                              f"a pyarrow.Schema does not): {exc}") from exc
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return spark_to_arrow(schema)
    raise OptionError(f"output_schema must be a pyarrow.Schema, a Spark StructType or a DDL "
                      f"string, got {type(schema).__name__}")


@dataclass(frozen=True, kw_only=True)
class OrderedOptions:
    """How the ordered stage reads, keeps state and writes output.

    - ``state_location``: fsspec URL under which each topic's state lives
      (``<state_location>/topic=<topic>/p=<partition>/...``).
    - ``output``: fsspec URL of the output table (Parquet files + the commit log whose
      per-batch record also publishes the state versions).
    - ``output_schema``: Arrow schema of the rows the user function returns.
    - ``key``: input column whose value groups state (Kafka's message ``key`` by default);
      None keeps ONE state per Kafka partition (the function then gets ``key=None``).
    - ``timeout``: ``NoTimeout()``, ``ProcessingTimeTimeout(default=None)`` or
      ``EventTimeTimeout(delay, column="timestamp")``.
    - ``columns``: input columns decoded into each record dict (None: all of them). Naming
      only the columns the function reads saves decoding (and shipping) the others for every
      record; timestamps are the costliest to decode.
    - ``max_cached_keys``: decoded state entries kept per task before a flush (memory bound).
    - ``output_batch_rows``: output rows buffered before an Arrow batch goes to the writer.
    - ``storage_options``: fsspec options for both URLs (e.g. s3fs endpoint and keys).
    - ``writer_options``: extra keyword options of ``orderedstream.sinks.writer`` (file size,
      compression).
    - ``store_options``: extra ``StateStoreOptions`` fields (``local_dir``, cache sizes).
    - ``checkpoint_location``: the streaming query's ``checkpointLocation`` (local path or
      fsspec URL, read with ``storage_options`` unless local). With it, each batch's tasks
      prefer the executor holding their partition's state
      (``orderedstream.statestore.ordered.placement``).
    - ``placement``: ``"auto"`` (place when the checkpoint is known, the JVM shim is loaded
      and the session runs on a cluster) or ``"off"`` (Spark's own placement).
    """

    state_location: str
    output: str
    output_schema: pa.Schema
    key: str | None = "key"
    timeout: Timeout = field(default_factory=NoTimeout)
    columns: tuple[str, ...] | None = None
    max_cached_keys: int = 10_000
    output_batch_rows: int = 8_192
    storage_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    query_name: str = "ordered"
    writer_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    store_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    checkpoint_location: str | None = None
    placement: Literal["auto", "off"] = "auto"

    def __post_init__(self) -> None:
        for name in ("state_location", "output"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise OptionError(f"OrderedStateful({name}={value!r}): a local path or an "
                                  "fsspec URL is required, e.g. s3://bucket/path or /data/path")
            if "://" not in value:  # a local path: relative to the driver's working directory,
                value = os.path.abspath(os.path.expanduser(value))  # as Spark's paths are
            object.__setattr__(self, name, value.rstrip("/") or "/")
        if self.state_location == self.output:
            raise OptionError("OrderedStateful: state_location and output must differ "
                              f"(both are {self.output!r})")
        if not isinstance(self.output_schema, pa.Schema) or len(self.output_schema) == 0:
            raise OptionError("OrderedStateful(output_schema=...): a non-empty schema is "
                              "required (pyarrow.Schema, Spark StructType or DDL string)")
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise OptionError(f"OrderedStateful(key={self.key!r}): a column name or None "
                              "(one state per Kafka partition)")
        if not isinstance(self.timeout, (NoTimeout, ProcessingTimeTimeout, EventTimeTimeout)):
            raise OptionError(f"OrderedStateful(timeout={self.timeout!r}): accepted are "
                              "NoTimeout(), ProcessingTimeTimeout(...), EventTimeTimeout(...)")
        for name in ("max_cached_keys", "output_batch_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OptionError(f"OrderedStateful({name}={value!r}): a positive integer")
        if self.placement not in PLACEMENT_MODES:
            raise OptionError(f"OrderedStateful(placement={self.placement!r}): accepted are "
                              f"{', '.join(repr(m) for m in PLACEMENT_MODES)}")
        if self.checkpoint_location is not None and (
                not isinstance(self.checkpoint_location, str) or not self.checkpoint_location):
            raise OptionError(f"OrderedStateful(checkpoint_location="
                              f"{self.checkpoint_location!r}): the query's checkpointLocation "
                              "(a path or fsspec URL), or None")
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))
        for name in ("storage_options", "writer_options", "store_options"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise OptionError(
                    f"OrderedStateful({name}=...): a dict is required, got a "
                    f"{type(value).__name__}" + (" (JSON text: pass json.loads(text))"
                                                  if isinstance(value, str) else ""))
            object.__setattr__(self, name, dict(value))

    def required_columns(self) -> list[str]:
        """Input columns the stage reads: Kafka coordinates, the key, event time, records."""
        wanted = list(KAFKA_COLUMNS)
        if self.key is not None:
            wanted.append(self.key)
        if isinstance(self.timeout, EventTimeTimeout):
            wanted.append(self.timeout.column)
        if self.columns is not None:
            wanted.extend(self.columns)
        return list(dict.fromkeys(wanted))

    def check_input(self, names: list[str]) -> None:
        """Refuse an input that lacks a column the stage needs, naming the option asking for it.

        Parameters
        ----------
        names
            The input DataFrame's column names.

        Raises
        ------
        OptionError
            A required column (:meth:`required_columns`) is missing.

        Runs on
        -------
        driver"""
        missing = [c for c in self.required_columns() if c not in names]
        if missing:
            origins = [self._asked_by(c) for c in missing]
            asked = f" (asked by {', '.join(dict.fromkeys(origins))})"
            raise OptionError(
                f"the ordered stage needs input columns {missing}{asked}, the batch has "
                f"{names}. Feed it the orderedkafka source's rows (topic, partition, offset, "
                "key, ...) or set key=/columns=/EventTimeTimeout(column=) to existing columns")

    def _asked_by(self, column: str) -> str:
        """Which option makes the stage read ``column`` (for check_input's error)."""
        if column == self.key:
            return f"key={column!r}"
        if isinstance(self.timeout, EventTimeTimeout) and column == self.timeout.column:
            return f"EventTimeTimeout(column={column!r})"
        if self.columns is not None and column in self.columns:
            return "columns=..."
        return "the Kafka coordinates"

    def check_locations(self) -> None:
        """State and output locations can be written: LocationError naming the URL (a missing
        bucket, denied access, a regular file on the path) before a batch reads a record."""
        for what, url in (("ordered state", self.state_location), ("ordered output",
                                                                     self.output)):
            check_location(url, what, options_for(url, self.storage_options))
