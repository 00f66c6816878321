"""Per-key TTL: how a stored value carries its expiry and how the expiry index is keyed.

A value without expiry is mostly stored as its codec payload, unframed; an index entry is
ordered by expiry so that a scan up to "now" touches only expired entries.
"""

from __future__ import annotations

import struct
import time

NO_TTL = b"\x00"
_NO_TTL = NO_TTL
_TTL = b"\x01"
BARE = b"\x02"
"""Stored bytes ``>= BARE`` are the payload itself (first byte >= 2: no frame needed)."""
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")

# Stored value, by its first byte (manifest format 3; older data is all framed, reads the same):
# - ``>= 0x02``: the codec payload as it is (no expiry). Most values: a pickle starts with
#   ``0x80``, JSON with a printable character, so a put or get copies no bytes for a frame.
# - ``0x00`` + payload: no expiry, for payloads that start with ``0x00``/``0x01`` (or empty).
# - ``0x01`` + 8-byte big-endian expiry in epoch milliseconds + payload.
# The expiry index (its own column family) is keyed
# ``expiry(8B BE) + len(space)(2B BE) + space + key`` with an empty value. An index entry is
# stale when its key was overwritten since; ``expire`` checks the value's own expiry before
# deleting, so stale entries are dropped without harm and a put never reads the old value.


def now_ms() -> int:
    """The wall clock as epoch milliseconds, the unit of every expiry here.

    Returns
    -------
    int
        Milliseconds since the epoch (``time.time_ns() // 1_000_000``).

    Runs on
    -------
    both"""
    return time.time_ns() // 1_000_000


def frame(payload: bytes, expires_at_ms: int | None) -> bytes:
    """The stored bytes for ``payload`` with an optional absolute expiry.

    Without an expiry the payload is stored unframed when its first byte is at least
    ``BARE``, else behind the ``NO_TTL`` byte; with one, behind ``0x01`` and the expiry.

    Parameters
    ----------
    payload
        The codec's encoded value.
    expires_at_ms
        Absolute expiry in epoch milliseconds (negative is stored as 0), or ``None`` for none.

    Returns
    -------
    bytes
        The bytes to put in the store; :func:`unframe` reads them back.

    Runs on
    -------
    executor"""
    if expires_at_ms is None:
        return payload if payload >= BARE else _NO_TTL + payload
    return _TTL + _U64.pack(max(0, expires_at_ms)) + payload


def unframe(stored: bytes) -> tuple[bytes, int | None]:
    """Split stored bytes into the codec payload and its expiry (inverse of :func:`frame`).

    Parameters
    ----------
    stored
        Bytes as read from the store (framed or bare).

    Returns
    -------
    tuple[bytes, int | None]
        ``(payload, expires_at_ms)``; the expiry is ``None`` when the value has none.

    Runs on
    -------
    both"""
    if stored >= BARE:
        return stored, None
    if stored[:1] == _TTL:
        return stored[9:], _U64.unpack_from(stored, 1)[0]
    return stored[1:], None


def expiry_of(stored: bytes) -> int | None:
    """The expiry of stored bytes, without copying the payload.

    Parameters
    ----------
    stored
        Bytes as read from the store (framed or bare).

    Returns
    -------
    int | None
        Absolute expiry in epoch milliseconds, or ``None`` when the value has none.

    Runs on
    -------
    both"""
    return _U64.unpack_from(stored, 1)[0] if stored[:1] == _TTL else None


def index_key(expires_at_ms: int, space: str, key: bytes) -> bytes:
    """The expiry index entry for ``key`` of ``space`` expiring at ``expires_at_ms``.

    Parameters
    ----------
    expires_at_ms
        Absolute expiry in epoch milliseconds (negative is stored as 0).
    space
        The state space (column family) the key belongs to.
    key
        The key's stored bytes.

    Returns
    -------
    bytes
        The index key, ordered by expiry first; :func:`parse_index_key` reads it back.

    Runs on
    -------
    executor"""
    name = space.encode()
    return _U64.pack(max(0, expires_at_ms)) + _U16.pack(len(name)) + name + key


def parse_index_key(entry: bytes) -> tuple[int, str, bytes]:
    """Split an expiry index entry (inverse of :func:`index_key`).

    Parameters
    ----------
    entry
        The index entry's key bytes.

    Returns
    -------
    tuple[int, str, bytes]
        ``(expires_at_ms, space, key)``.

    Runs on
    -------
    both"""
    expires = _U64.unpack_from(entry, 0)[0]
    length = _U16.unpack_from(entry, 8)[0]
    return expires, entry[10:10 + length].decode(), entry[10 + length:]


def index_upper_bound(now: int) -> bytes:
    """Exclusive upper bound of the index entries expiring at or before ``now``.

    Parameters
    ----------
    now
        The current time in epoch milliseconds.

    Returns
    -------
    bytes
        The bound to stop an index scan at.

    Runs on
    -------
    executor"""
    return _U64.pack(now + 1)
