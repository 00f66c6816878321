"""Delta statistics of a Parquet file, accumulated batch by batch while it is written.

``FileStats.update(batch)`` per written Arrow batch, ``to_delta(rows)`` when the file closes:
``numRecords``, ``minValues``, ``maxValues``, ``nullCount`` as a Delta add action carries them
(readers use them to skip files). No second read of the file.

Bounds are always safe: a minimum is truncated down, a maximum up (timestamps to
milliseconds, as Delta stores them), and a bound that cannot be stated exactly is left out
(strings longer than 32 characters keep only the minimum's prefix, floats with NaN, decimals,
booleans, binary and nested columns get only their null count).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STRING_PREFIX = 32
_EPOCH = datetime.datetime(1970, 1, 1)
_US_PER = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0}


@dataclass
class _ColumnStats:
    """Running min / max / null count of one column of one file."""

    nulls: int = 0
    low: Any = None
    high: Any = None
    bounds: bool = True  # False once a bound cannot be stated safely

    def update(self, column: pa.ChunkedArray | pa.Array) -> None:
        self.nulls += column.null_count
        kind = column.type
        if not self.bounds or not _bounded(kind):
            self.bounds = False
            return
        if column.null_count == len(column):
            return
        if pa.types.is_floating(kind) and pc.any(pc.is_nan(column)).as_py():
            self.bounds = False
            return
        found = pc.min_max(column)
        low, high = _json_bound(found["min"], kind, up=False), _json_bound(found["max"], kind,
                                                                           up=True)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            low = low[:STRING_PREFIX]
            if len(high) > STRING_PREFIX:
                self.bounds = False
                return
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)


def _bounded(kind: pa.DataType) -> bool:
    return (pa.types.is_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_date(kind)
            or (pa.types.is_timestamp(kind) and kind.unit != "ns"))


def _json_bound(scalar: pa.Scalar, kind: pa.DataType, *, up: bool) -> Any:
    """A comparable JSON value of a min (``up`` False) or max bound, as Delta writes it."""
    if pa.types.is_timestamp(kind):
        micros = scalar.cast(pa.int64()).as_py() * _US_PER[kind.unit]
        millis = -((-micros) // 1000) if up else micros // 1000
        moment = _EPOCH + datetime.timedelta(milliseconds=millis)
        text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
        return text + ("Z" if kind.tz is not None else "")
    if pa.types.is_date(kind):
        return scalar.as_py().isoformat()
    return scalar.as_py()


@dataclass
class FileStats:
    """Running Delta statistics of one file's data columns."""

    columns: dict[str, _ColumnStats] = field(default_factory=dict)

    def update(self, batch: pa.RecordBatch) -> None:
        """Add one written Arrow batch to the running statistics of its columns.

        Parameters
        ----------
        batch
            Rows just handed to the file's Parquet writer (data columns only).

        Runs on
        -------
        executor (the writer's background thread)"""
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            self.columns.setdefault(name, _ColumnStats()).update(column)

    def to_delta(self, rows: int) -> dict[str, Any]:
        """The file's statistics as a Delta add action's ``stats`` (before JSON encoding).

        Parameters
        ----------
        rows
            The file's row count (``numRecords``).

        Returns
        -------
        dict
            ``numRecords``, ``minValues`` and ``maxValues`` (only columns with a safe bound),
            ``nullCount`` (every column).

        Runs on
        -------
        executor"""
        cols = self.columns
        return {
            "numRecords": rows,
            "minValues": {n: c.low for n, c in cols.items() if c.bounds and c.low is not None},
            "maxValues": {n: c.high for n, c in cols.items() if c.bounds and c.high is not None},
            "nullCount": {n: c.nulls for n, c in cols.items()},
        }


__all__ = ["STRING_PREFIX", "FileStats"]
