"""Arrow slices -> the Python values the ordered user function gets (executor side, hot path).

Each slice is converted once per column (timestamps through numpy, equal value for value, tz
included) and the per-record dicts are zipped from those lists, instead of row by row with
``RecordBatch.to_pylist()``, whose per-value timestamp conversion dominates.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from orderedstream.statestore.ordered.keyed_state import encode_key

_NULL_KEY = encode_key(None)
# Zones whose UTC offset is always 0: ``fromutc`` is then ``replace(tzinfo=...)``.
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu",
                        "UCT", "Etc/UCT", "GMT", "Etc/GMT", "Etc/GMT0", "Etc/GMT+0",
                        "Etc/GMT-0", "GMT0", "GMT+0", "GMT-0", "Greenwich", "Etc/Greenwich",
                        "+00:00", "-00:00", "Z"})
# datetime's range (years 1..9999) in each unit numpy converts to datetime objects.
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000}
_MIN_S, _MAX_S = -62_135_596_800, 253_402_300_799
_DEDUP_MIN = 64  # below this many values, converting each one is as cheap


def column_values(column: pa.Array) -> list[Any]:
    """``column.to_pylist()``, faster for timestamps (same values, same tzinfo objects).

    Parameters
    ----------
    column
        One column of a slice.

    Returns
    -------
    list[Any]
        Its Python values; repeated timestamps share one ``datetime`` object.

    Runs on
    -------
    executor"""
    typ = column.type
    if pa.types.is_timestamp(typ) and typ.unit in _PER_SECOND and len(column):
        if column.null_count == 0 and len(column) >= _DEDUP_MIN:
            # Kafka timestamps repeat (a producer batch shares one): convert each distinct
            # value once, then share the (immutable) datetime objects.
            encoded = column.dictionary_encode()
            if len(encoded.dictionary) * 2 <= len(column):
                distinct = _timestamps(encoded.dictionary, typ)
                if distinct is not None:
                    return list(map(distinct.__getitem__, encoded.indices.to_pylist()))
        fast = _timestamps(column, typ)
        if fast is not None:
            return fast
    return column.to_pylist()


def _timestamps(column: pa.Array, typ: pa.TimestampType) -> list[Any] | None:
    """Timestamps via numpy's C conversion; None when out of ``datetime``'s range."""
    if column.null_count < len(column):
        bounds = pc.min_max(column.view(pa.int64()))
        per_second = _PER_SECOND[typ.unit]
        if (bounds["min"].as_py() < _MIN_S * per_second
                or bounds["max"].as_py() > _MAX_S * per_second):
            return None
    naive = column.cast(pa.timestamp(typ.unit)) if typ.tz is not None else column
    values: list[Any] = naive.to_numpy(zero_copy_only=False).astype(object).tolist()
    if typ.tz is None:
        return values
    tzinfo = pa.scalar(0, type=typ).as_py().tzinfo  # the object pyarrow itself attaches
    if typ.tz in _UTC_NAMES or tzinfo is datetime.UTC:
        return [None if v is None else v.replace(tzinfo=tzinfo) for v in values]
    fromutc = tzinfo.fromutc
    return [None if v is None else fromutc(v.replace(tzinfo=tzinfo)) for v in values]


def encoded_keys(column: pa.Array, keys: Sequence[Any]) -> list[bytes]:
    """``[encode_key(k) for k in keys]`` for a key column, with fast paths for bytes/strings.

    Parameters
    ----------
    column
        The key column (its type picks the fast path).
    keys
        The column's Python values (:func:`column_values`).

    Returns
    -------
    list[bytes]
        The encoded keys, one per value.

    Runs on
    -------
    executor"""
    typ = column.type
    null = _NULL_KEY
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return [null if k is None else b"b" + k for k in keys]
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return [null if k is None else b"s" + k.encode() for k in keys]
    return [encode_key(k) for k in keys]


class RecordDecoder:
    """Decodes one slice at a time into keys, encoded keys and record dicts.

    ``columns`` are the record dicts' keys (None: every column of the slice, in its order);
    ``key`` the grouping column (None: one state per Kafka partition, every key None).
    """

    def __init__(self, columns: Sequence[str] | None, key: str | None) -> None:
        self.columns = None if columns is None else tuple(columns)
        self.key = key

    def decode(self, piece: pa.RecordBatch,
               ) -> tuple[Sequence[Any], Sequence[bytes], Iterator[dict[str, Any]]]:
        """The keys, encoded keys and record dicts of one slice.

        Parameters
        ----------
        piece
            A slice of one Kafka partition's records.

        Returns
        -------
        tuple[Sequence[Any], Sequence[bytes], Iterator[dict[str, Any]]]
            ``(keys, encoded keys, records)``, each ``piece.num_rows`` long.

        Raises
        ------
        KeyError
            A configured column or the key column is not in ``piece``.

        Runs on
        -------
        executor"""
        rows = piece.num_rows
        names = tuple(piece.schema.names) if self.columns is None else self.columns
        values = [column_values(piece.column(name)) for name in names]
        if self.key is None:
            keys: Sequence[Any] = [None] * rows
            encoded: Sequence[bytes] = [_NULL_KEY] * rows
        else:
            column = piece.column(self.key)
            keys = values[names.index(self.key)] if self.key in names else column_values(column)
            encoded = encoded_keys(column, keys)
        records: Iterator[dict[str, Any]]
        if names:
            records = map(dict, map(zip, repeat(names), zip(*values)))
        else:
            records = ({} for _ in range(rows))
        return keys, encoded, records

