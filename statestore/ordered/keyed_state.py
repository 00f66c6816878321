"""Per-key state of one Kafka partition over a ``StatePartition``: a bounded cache + timeouts.

Runs on executors, inside the ordered stage's task. Changed entries are written through one
WriteBatch when the cache reaches ``max_cached`` entries and at the end of the batch, so
memory is bounded by ``max_cached`` whatever the number of keys.
"""

from __future__ import annotations

import itertools
import pickle
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orderedstream.statestore.base import StatePartition

# Layout in the partition: space ``ordered_state``: ``encoded key -> (value, timeout_ms |
# None)`` (pickle codec); space ``ordered_timeouts``: ``big-endian timeout_ms + encoded key ->
# b""`` (bytes codec), so a timeout pass reads only the keys whose timeout passed, in order.
STATE_SPACE = "ordered_state"
TIMEOUT_SPACE = "ordered_timeouts"
_BE64 = struct.Struct(">q")
_TIMEOUT_CHUNK = 1024


def encode_key(key: Any) -> bytes:
    """The stored bytes of a grouping key; the first byte tags the type so decoding is exact.

    Parameters
    ----------
    key
        ``None``, bytes-like, ``str`` (stored as UTF-8) or any other picklable key.

    Returns
    -------
    bytes
        The tag (``n``, ``b``, ``s`` or ``p`` for pickle) and the key's bytes.

    Raises
    ------
    pickle.PicklingError
        A key of another type cannot be pickled.

    Runs on
    -------
    executor"""
    if key is None:
        return b"n"
    if isinstance(key, (bytes, bytearray, memoryview)):
        return b"b" + bytes(key)
    if isinstance(key, str):
        return b"s" + key.encode()
    return b"p" + pickle.dumps(key, protocol=5)


def decode_key(data: bytes) -> Any:
    """The grouping key of bytes written by :func:`encode_key`.

    Parameters
    ----------
    data
        The key's stored bytes.

    Returns
    -------
    Any
        The key, of the type it was encoded from (bytes-like keys come back as ``bytes``).

    Runs on
    -------
    both"""
    tag, rest = data[:1], data[1:]
    if tag == b"n":
        return None
    if tag == b"b":
        return rest
    if tag == b"s":
        return rest.decode()
    return pickle.loads(rest)


@dataclass
class StateEntry:
    """One key's state as the user function sees it, plus what is persisted for it."""

    value: Any = None
    exists: bool = False
    timeout_ms: int | None = None
    persisted_timeout_ms: int | None = None
    dirty: bool = False


class KeyedStateTable:
    """Bounded cache of decoded per-key state over one open ``StatePartition``.

    Not thread-safe; owned by the task that opened the partition.
    """

    def __init__(self, part: StatePartition, max_cached: int = 10_000) -> None:
        self.part = part
        self.max_cached = max(1, int(max_cached))
        self._cache: dict[bytes, StateEntry] = {}
        self.flushes = 0
        self.loads = 0

    @property
    def cache(self) -> dict[bytes, StateEntry]:
        """The decoded entries held now (the same dict for the table's life). For hot loops:
        ``cache.get(key) or load(key)``; change entries only through what ``load`` returns."""
        return self._cache

    def load(self, key: bytes) -> StateEntry:
        """The entry of ``key``, from the cache, else read from the store.

        A full cache is flushed and emptied first, so the cache stays within ``max_cached``.

        Parameters
        ----------
        key
            The encoded key (:func:`encode_key`).

        Returns
        -------
        StateEntry
            The cached entry (an empty one for a key without state); change it in place.

        Runs on
        -------
        executor"""
        entry = self._cache.get(key)
        if entry is not None:
            return entry
        if len(self._cache) >= self.max_cached:
            self.flush(evict=True)
        self.loads += 1
        stored = self.part.get_for_update(key, space=STATE_SPACE)
        if stored is None:
            entry = StateEntry()
        else:
            value, timeout_ms = stored
            entry = StateEntry(value=value, exists=True, timeout_ms=timeout_ms,
                               persisted_timeout_ms=timeout_ms)
        self._cache[key] = entry
        return entry

    def flush(self, evict: bool = False) -> None:
        """Write the changed entries and their timeout index updates to the partition.

        Parameters
        ----------
        evict
            Also empty the cache afterwards.

        Runs on
        -------
        executor"""
        puts: list[tuple[bytes, Any]] = []
        deletes: list[bytes] = []
        index_puts: list[tuple[bytes, bytes]] = []
        index_deletes: list[bytes] = []
        for key, entry in self._cache.items():
            if not entry.dirty:
                continue
            if entry.exists:
                puts.append((key, (entry.value, entry.timeout_ms)))
            else:
                deletes.append(key)
                entry.timeout_ms = None
            if entry.persisted_timeout_ms != entry.timeout_ms:
                if entry.persisted_timeout_ms is not None:
                    index_deletes.append(_BE64.pack(entry.persisted_timeout_ms) + key)
                if entry.timeout_ms is not None:
                    index_puts.append((_BE64.pack(entry.timeout_ms) + key, b""))
                entry.persisted_timeout_ms = entry.timeout_ms
            entry.dirty = False
        if puts:
            self.part.put_many(puts, space=STATE_SPACE)
        for key in deletes:
            self.part.delete(key, space=STATE_SPACE)
        for key in index_deletes:
            self.part.delete(key, space=TIMEOUT_SPACE)
        if index_puts:
            self.part.put_many(index_puts, space=TIMEOUT_SPACE)
        if puts or deletes:
            self.flushes += 1
        if evict:
            self._cache.clear()

    def expired(self, threshold_ms: int) -> Iterator[bytes]:
        """Keys whose timeout is before ``threshold_ms``, in timeout order, each at most once.

        Reads the timeout index in chunks and flushes between chunks, so the caller may change
        entries (and their timeouts) while iterating; a timeout set below the threshold during
        the pass is not revisited in it.

        Parameters
        ----------
        threshold_ms
            Epoch milliseconds; timeouts strictly below it have passed.

        Returns
        -------
        Iterator[bytes]
            The encoded keys that timed out (stale index entries are skipped).

        Runs on
        -------
        executor
        """
        self.flush()
        end = _BE64.pack(max(threshold_ms, 0))
        start = b""
        while True:
            chunk = [k for k, _ in itertools.islice(
                self.part.range(start or None, end, space=TIMEOUT_SPACE), _TIMEOUT_CHUNK)]
            if not chunk:
                return
            for index_key in chunk:
                key = index_key[8:]
                entry = self.load(key)
                timeout = _BE64.unpack(index_key[:8])[0]
                if entry.exists and entry.timeout_ms == timeout:
                    yield key
            self.flush()
            start = chunk[-1] + b"\x00"

    def next_timeout_ms(self) -> int | None:
        """The earliest timeout of any key (after a flush), or None when no key has one."""
        self.flush()
        for index_key, _ in self.part.range(space=TIMEOUT_SPACE):
            return int(_BE64.unpack(index_key[:8])[0])
        return None
