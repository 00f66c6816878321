"""Capture-session messages: a snapshot (full table), then row changes, then an end marker.

Wire format (Kafka value, UTF-8 JSON; Kafka key = session id):
``{"type": "snapshot", "session": s, "site": x, "seq": 0, "ts": ms, "rows": {row_id: {...}}}``,
``{"type": "insert"|"update"|"delete", "session": s, "site": x, "seq": n, "ts": ms,
"row": row_id, "values": {...}}`` and
``{"type": "end", "session": s, "site": x, "seq": n, "ts": ms}``.
``seq`` counts a session's messages from 0; the job checks it to prove order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MESSAGE_TYPES = ("snapshot", "insert", "update", "delete", "end")
CHANGE_TYPES = ("insert", "update", "delete")


@dataclass(frozen=True)
class Message:
    """One parsed capture-session message."""

    type: str
    session: str
    site: str
    seq: int
    ts: int
    row: str | None = None
    values: dict[str, Any] | None = None
    rows: dict[str, dict[str, Any]] | None = None


class BadMessage(ValueError):
    """A payload that cannot be applied; ``reason`` is a short stable code for the dead letters."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def parse(key: bytes | None, value: bytes | None) -> Message:
    """Decode and validate one Kafka record.

    Parameters
    ----------
    key
        The record's key: the session id, or None.
    value
        The record's value: the message as UTF-8 JSON.

    Returns
    -------
    Message
        The parsed message.

    Raises
    ------
    BadMessage
        The record cannot be applied; ``reason`` says why (``null_value``, ``not_utf8``,
        ``bad_json``, ``unknown_type``, ``missing_field``, ``key_mismatch``).

    Runs on
    -------
    executor (the ordered stage's per-record function)"""
    if value is None:
        raise BadMessage("null_value", "record has no value")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadMessage("not_utf8",
                         f"value is not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadMessage("bad_json", f"value is not JSON ({exc.msg} at char {exc.pos})") from exc
    if not isinstance(doc, dict):
        raise BadMessage("bad_json", "value is not a JSON object")
    kind = doc.get("type")
    if kind not in MESSAGE_TYPES:
        raise BadMessage("unknown_type", f"type {kind!r} is not one of {', '.join(MESSAGE_TYPES)}")
    try:
        session, site = str(doc["session"]), str(doc["site"])
        seq, ts = int(doc["seq"]), int(doc["ts"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadMessage("missing_field", f"{kind} message lacks a valid field ({exc})") from exc
    if key is not None and key.decode("utf-8", "replace") != session:
        raise BadMessage("key_mismatch", f"Kafka key {key!r} is not the session id {session!r}")
    if kind == "snapshot":
        rows = doc.get("rows")
        if not isinstance(rows, dict):
            raise BadMessage("missing_field", "snapshot message has no 'rows' object")
        return Message(kind, session, site, seq, ts, rows=rows)
    if kind in CHANGE_TYPES:
        row = doc.get("row")
        if row is None:
            raise BadMessage("missing_field", f"{kind} message has no 'row'")
        values = doc.get("values") if kind != "delete" else None
        if kind != "delete" and not isinstance(values, dict):
            raise BadMessage("missing_field", f"{kind} message has no 'values' object")
        return Message(kind, session, site, seq, ts, row=str(row), values=values)
    return Message(kind, session, site, seq, ts)


def encode(message: dict[str, Any]) -> bytes:
    """Encode a message dict as compact UTF-8 JSON, keys sorted.

    Parameters
    ----------
    message
        A message in the wire format (the module's docstring)."""
    return json.dumps(message, separators=(",", ":"), sort_keys=True).encode()
