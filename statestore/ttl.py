"""Per-key TTL: how a value carries its expiry and how the expiry index is keyed.

Stored value, by its first byte (manifest format 3; older data is all framed and reads the same):

- ``>= 0x02``: the codec payload as it is (no expiry). Most values: a pickle starts with
  ``0x80``, JSON with a printable character, so a put or get copies no bytes for the frame.
- ``0x00`` + payload: no expiry, for payloads that start with ``0x00``/``0x01`` (or are empty).
- ``0x01`` + 8-byte big-endian expiry in ms + payload.

The expiry index (its own column family) is keyed
``expiry(8B BE) + len(space)(2B BE) + space + key`` with an empty value, so a scan up to
"now" touches only expired entries. An index entry is stale when the key was overwritten
since; ``expire`` checks the value's own expiry before deleting, so stale entries are
dropped without harm and a put never has to read the old value.
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


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def frame(payload: bytes, expires_at_ms: int | None) -> bytes:
    """The stored bytes for ``payload`` with an optional absolute expiry."""
    if expires_at_ms is None:
        return payload if payload >= BARE else _NO_TTL + payload
    return _TTL + _U64.pack(max(0, expires_at_ms)) + payload


def unframe(stored: bytes) -> tuple[bytes, int | None]:
    """``(payload, expires_at_ms or None)`` of stored bytes."""
    if stored >= BARE:
        return stored, None
    if stored[:1] == _TTL:
        return stored[9:], _U64.unpack_from(stored, 1)[0]
    return stored[1:], None


def expiry_of(stored: bytes) -> int | None:
    return _U64.unpack_from(stored, 1)[0] if stored[:1] == _TTL else None


def index_key(expires_at_ms: int, space: str, key: bytes) -> bytes:
    name = space.encode()
    return _U64.pack(max(0, expires_at_ms)) + _U16.pack(len(name)) + name + key


def parse_index_key(entry: bytes) -> tuple[int, str, bytes]:
    """``(expires_at_ms, space, key)`` of an expiry index entry."""
    expires = _U64.unpack_from(entry, 0)[0]
    length = _U16.unpack_from(entry, 8)[0]
    return expires, entry[10:10 + length].decode(), entry[10 + length:]


def index_upper_bound(now: int) -> bytes:
    """Exclusive upper bound of entries expiring at or before ``now``."""
    return _U64.pack(now + 1)
