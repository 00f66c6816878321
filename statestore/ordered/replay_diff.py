"""Comparing a replay with what its batch committed: output rows and end state.

Output rows are compared per key as multisets, spilled to per-bucket Arrow IPC files so
memory stays bounded (:class:`OutputSpill`); state key by key in key order, streaming both
sides (:func:`diff_state`).
"""

from __future__ import annotations

import math
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from orderedstream.statestore.ordered.keyed_state import decode_key

DEFAULT_BUCKET_ROWS = 200_000
MAX_LISTED = 20
MAX_KEYS = 10_000


@dataclass(frozen=True)
class Difference:
    """One difference: which key, which Kafka offset (None when the row has none, or for
    state), which column (``<row>`` for a whole added/removed row), and the two values."""

    key: Any
    offset: int | None
    column: str
    committed: Any
    replayed: Any

    def describe(self) -> str:
        """The difference as one line: key, offset, column, committed vs replayed (shortened)."""
        return (f"key {self.key!r} offset {self.offset} column {self.column}: committed "
                f"{_short(self.committed)} vs replayed {_short(self.replayed)}")


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class OutputDiff:
    """Rows compared, and how they differ, in total and per key."""

    same: int = 0
    added: int = 0
    removed: int = 0
    changed: int = 0
    per_key: dict[str, list[int]] = field(default_factory=dict)
    """repr(key) -> [added, removed, changed], for keys with differences (first MAX_KEYS)."""
    keys_differing: int = 0
    first: list[Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """True when no row was added, removed or changed."""
        return self.added == self.removed == self.changed == 0

    def merge(self, other: OutputDiff) -> None:
        """Add another diff's counts to this one (per-key counts up to ``MAX_KEYS`` keys, listed
        differences up to ``MAX_LISTED``).

        Parameters
        ----------
        other
            A diff of another bucket or batch; not changed.

        Runs on
        -------
        driver"""
        self.same += other.same
        self.added += other.added
        self.removed += other.removed
        self.changed += other.changed
        for key, counts in other.per_key.items():
            mine = self.per_key.get(key)
            if mine is None:
                if len(self.per_key) < MAX_KEYS:
                    self.per_key[key] = list(counts)
                self.keys_differing += 1
            else:
                for i in range(3):
                    mine[i] += counts[i]
        self.first.extend(other.first[:max(0, MAX_LISTED - len(self.first))])

    def _count(self, key: Any, index: int, amount: int = 1) -> None:
        name = repr(key)
        counts = self.per_key.get(name)
        if counts is None:
            self.keys_differing += 1
            if len(self.per_key) >= MAX_KEYS:
                return
            counts = self.per_key[name] = [0, 0, 0]
        counts[index] += amount

    def _note(self, diff: Difference) -> None:
        if len(self.first) < MAX_LISTED:
            self.first.append(diff)


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


class OutputSpill:
    """Both sides' rows, spilled to per-bucket Arrow IPC files under ``directory``.

    Rows are compared per key (the output columns that name the entity a row belongs to) as
    multisets: rows found on both sides are equal; the rest are *changed* when a committed
    and a replayed row of the same key share the Kafka ``offset`` column (or, without
    offsets, pair up in sorted order), else *removed* (committed only) or *added* (replayed
    only). Buckets hold about ``bucket_rows`` rows each and are compared one at a time.

    Parameters
    ----------
    directory
        Where the spill files go (created).
    schema
        The output schema both sides are cast to.
    key_columns
        The key's columns (those not in ``schema`` are ignored; none: one key).
    expected_rows
        The committed row count, which sets the number of buckets.
    bucket_rows
        Rows per bucket, about."""

    def __init__(self, directory: str, schema: pa.Schema, key_columns: Iterable[str], *,
                 expected_rows: int, bucket_rows: int = DEFAULT_BUCKET_ROWS) -> None:
        self.directory = directory
        self.schema = schema
        self.key_columns = [c for c in key_columns if c in schema.names]
        self.buckets = max(1, math.ceil(max(1, expected_rows) / max(1, bucket_rows)))
        self._writers: dict[tuple[str, int], pa.ipc.RecordBatchStreamWriter] = {}
        os.makedirs(directory, exist_ok=True)

    def key_of(self, row: dict[str, Any]) -> Any:
        """The key of an output row: ``None`` without key columns, the value of a single one,
        else the tuple of values.

        Parameters
        ----------
        row
            The row as a dict by column name.

        Returns
        -------
        Any
            The key.

        Runs on
        -------
        driver"""
        if not self.key_columns:
            return None
        if len(self.key_columns) == 1:
            return row[self.key_columns[0]]
        return tuple(row[c] for c in self.key_columns)

    def add(self, side: str, batch: pa.RecordBatch) -> None:
        """Append a batch of one side's rows to their key's buckets.

        Parameters
        ----------
        side
            ``"committed"`` or ``"replayed"``.
        batch
            Rows with at least the schema's columns (extra ones are dropped).

        Raises
        ------
        pyarrow.ArrowInvalid
            The rows cannot be cast to the output schema.

        Runs on
        -------
        driver"""
        batch = batch.select(self.schema.names)
        if self.buckets == 1:
            self._writer(side, 0).write_batch(batch.cast(self.schema))
            return
        keys = batch.select(self.key_columns).to_pylist() if self.key_columns else None
        index: dict[int, list[int]] = {}
        for i in range(batch.num_rows):
            k = repr(tuple(keys[i].values())) if keys is not None else ""
            index.setdefault(zlib.crc32(k.encode()) % self.buckets, []).append(i)
        for bucket, rows in index.items():
            self._writer(side, bucket).write_batch(batch.take(pa.array(rows)).cast(self.schema))

    def _writer(self, side: str, bucket: int) -> pa.ipc.RecordBatchStreamWriter:
        writer = self._writers.get((side, bucket))
        if writer is None:
            path = os.path.join(self.directory, f"{side}-{bucket}.arrow")
            writer = self._writers[(side, bucket)] = pa.ipc.new_stream(path, self.schema)
        return writer

    def _rows(self, side: str, bucket: int) -> list[dict[str, Any]]:
        path = os.path.join(self.directory, f"{side}-{bucket}.arrow")
        if not os.path.exists(path):
            return []
        with pa.memory_map(path) as source:
            return pa.ipc.open_stream(source).read_all().to_pylist()

    def diff(self) -> OutputDiff:
        """Compare the sides bucket by bucket (each file is removed once compared)."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        total = OutputDiff()
        for bucket in range(self.buckets):
            total.merge(self._diff_bucket(self._rows("committed", bucket),
                                          self._rows("replayed", bucket)))
            for side in ("committed", "replayed"):
                path = os.path.join(self.directory, f"{side}-{bucket}.arrow")
                if os.path.exists(path):
                    os.remove(path)
        return total

    def _diff_bucket(self, committed: list[dict], replayed: list[dict]) -> OutputDiff:
        out = OutputDiff()
        by_key: dict[Any, tuple[list[dict], list[dict]]] = {}
        for side, rows in ((0, committed), (1, replayed)):
            for row in rows:
                by_key.setdefault(_freeze(self.key_of(row)), ([], []))[side].append(row)
        for key, (old, new) in by_key.items():
            olds = Counter(_freeze(tuple(r.values())) for r in old)
            news = Counter(_freeze(tuple(r.values())) for r in new)
            common = olds & news
            out.same += sum(common.values())
            if olds == news:
                continue
            shared_old, shared_new = Counter(common), Counter(common)
            gone = [r for r in old if _take(shared_old, r)]
            came = [r for r in new if _take(shared_new, r)]
            self._pair(out, key, gone, came)
        return out

    def _pair(self, out: OutputDiff, key: Any, gone: list[dict], came: list[dict]) -> None:
        pairs: list[tuple[dict, dict]] = []
        if "offset" in self.schema.names:
            waiting: dict[Any, list[dict]] = {}
            for row in came:
                if row.get("offset") is not None:
                    waiting.setdefault(row["offset"], []).append(row)
            rest_gone = []
            for row in gone:
                match = waiting.get(row.get("offset")) if row.get("offset") is not None else None
                if match:
                    pairs.append((row, match.pop(0)))
                else:
                    rest_gone.append(row)
            paired = {id(b) for _, b in pairs}
            gone = [r for r in rest_gone if r.get("offset") is None]
            unmatched_gone = [r for r in rest_gone if r.get("offset") is not None]
            left = [r for r in came if id(r) not in paired]
            unmatched_came = [r for r in left if r.get("offset") is not None]
            came = [r for r in left if r.get("offset") is None]
        else:
            unmatched_gone, unmatched_came = [], []
        gone.sort(key=repr)
        came.sort(key=repr)
        pairs.extend(zip(gone, came, strict=False))
        unmatched_gone += gone[len(came):]
        unmatched_came += came[len(gone):]
        for old, new in pairs:
            out.changed += 1
            out._count(key, 2)
            for column in self.schema.names:
                if _freeze(old.get(column)) != _freeze(new.get(column)):
                    out._note(Difference(key, old.get("offset"), column, old.get(column),
                                         new.get(column)))
        for row in unmatched_gone:
            out.removed += 1
            out._count(key, 1)
            out._note(Difference(key, row.get("offset"), "<row removed>", row, None))
        for row in unmatched_came:
            out.added += 1
            out._count(key, 0)
            out._note(Difference(key, row.get("offset"), "<row added>", None, row))


def _take(common: Counter, row: dict) -> bool:
    """True when ``row`` is one of the leftovers (beyond the rows both sides share)."""
    frozen = _freeze(tuple(row.values()))
    if common.get(frozen, 0) > 0:
        common[frozen] -= 1
        return False
    return True


@dataclass
class StateDiff:
    """End state of a replay against the committed state version."""

    committed_keys: int = 0
    replayed_keys: int = 0
    only_committed: int = 0
    only_replayed: int = 0
    changed: int = 0
    first: list[Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """True when both sides have the same keys with the same values and timeouts."""
        return self.only_committed == self.only_replayed == self.changed == 0

    def _note(self, diff: Difference) -> None:
        if len(self.first) < MAX_LISTED:
            self.first.append(diff)


_END = object()


def diff_state(committed: Iterator[tuple[bytes, Any]], replayed: Iterator[tuple[bytes, Any]],
               ) -> StateDiff:
    """Compare two states by merge-joining their key-ordered streams.

    Parameters
    ----------
    committed
        ``(encoded key, (value, timeout_ms))`` of the committed version, in key order.
    replayed
        The same of the replay's end state.

    Returns
    -------
    StateDiff
        Key counts, keys on one side only, changed values or timeouts, the first differences.

    Runs on
    -------
    driver"""
    out = StateDiff()
    old: Any = next(committed, _END)
    new: Any = next(replayed, _END)
    while old is not _END or new is not _END:
        if new is _END or (old is not _END and old[0] < new[0]):
            out.committed_keys += 1
            out.only_committed += 1
            out._note(Difference(decode_key(old[0]), None, "<key missing in replay>",
                                 old[1][0], None))
            old = next(committed, _END)
        elif old is _END or new[0] < old[0]:
            out.replayed_keys += 1
            out.only_replayed += 1
            out._note(Difference(decode_key(new[0]), None, "<key only in replay>", None,
                                 new[1][0]))
            new = next(replayed, _END)
        else:
            out.committed_keys += 1
            out.replayed_keys += 1
            (old_value, old_timeout), (new_value, new_timeout) = old[1], new[1]
            if _freeze(old_value) != _freeze(new_value) or old_timeout != new_timeout:
                out.changed += 1
                column = "value" if _freeze(old_value) != _freeze(new_value) else "timeout_ms"
                out._note(Difference(decode_key(old[0]), None, column,
                                     old_value if column == "value" else old_timeout,
                                     new_value if column == "value" else new_timeout))
            old = next(committed, _END)
            new = next(replayed, _END)
    return out


__all__ = ["Difference", "OutputDiff", "OutputSpill", "StateDiff", "diff_state"]
