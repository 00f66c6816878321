"""The job's per-session logic: rebuild each capture session's table, record by record.

``update_session`` is the user function of ``orderedstream.statestore.ordered.OrderedStateful``: it
runs on the executors, once per Kafka record in offset order (and once per idle session's
timeout), with
the session's state (its table and how many messages were applied). It returns rows of one
output table, ``OUTPUT_SCHEMA``, told apart by ``kind``:

- ``change``: every applied message (snapshot / insert / update / delete / end), with the
  producer's ``seq`` and the job's ``applied_seq`` (equal when applied in order);
- ``snapshot``: the session's full table, every ``snapshot_every`` changes (``op="periodic"``),
  at its end (``op="final"``) and when it expires idle (``op="expired"``);
- ``dead_letter``: a record that could not be applied, with ``reason`` and its raw bytes.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from orderedstream.app.job.messages import BadMessage, Message, parse

OUTPUT_SCHEMA = pa.schema([
    pa.field("kind", pa.string(), nullable=False),
    pa.field("site", pa.string(), nullable=False),
    pa.field("date", pa.string(), nullable=False),
    pa.field("session", pa.string()),
    pa.field("seq", pa.int64()),
    pa.field("applied_seq", pa.int64()),
    pa.field("op", pa.string()),
    pa.field("row", pa.string()),
    pa.field("values", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("event_time", pa.timestamp("us", tz="UTC")),
    pa.field("reason", pa.string()),
    pa.field("raw_value", pa.binary()),
])
PARTITION_BY = ("kind", "site", "date")


@dataclass(frozen=True)
class SessionLogic:
    """The user function, configured: picklable, shipped to every task."""

    snapshot_every: int = 100
    idle_timeout: str = "10 minutes"
    output_key_columns: ClassVar[tuple[str, ...]] = ("session",)
    """Output columns naming the entity of a row: how ``orderedstream replay`` groups diffs."""

    def __call__(self, key: Any, record: dict[str, Any] | None, state: Any) -> Iterator[dict]:
        if record is None:  # the session's idle timeout fired
            if state.exists:
                value = state.get()
                yield from _table_rows(value, "expired", value["last_ts"])
                state.remove()
            return
        try:
            msg = parse(record.get("key"), record.get("value"))
        except BadMessage as exc:
            yield _dead_letter(record, exc.reason, exc.detail)
            return
        if msg.type != "snapshot" and not state.exists:
            yield _dead_letter(record, "no_snapshot",
                               f"{msg.type} for session {msg.session} before its snapshot")
            return
        value = {"site": msg.site, "session": msg.session, "table": {}, "applied": 0,
                 "last_ts": msg.ts} if msg.type == "snapshot" else state.get()
        applied = value["applied"]
        if msg.type == "snapshot":
            value["table"] = dict(msg.rows or {})
            values = json.dumps(msg.rows, sort_keys=True, separators=(",", ":"))
        elif msg.type in ("insert", "update"):
            value["table"][msg.row] = msg.values
            values = json.dumps(msg.values, sort_keys=True, separators=(",", ":"))
        elif msg.type == "delete":
            value["table"].pop(msg.row, None)
            values = None
        else:
            values = None
        value["applied"] = applied + 1
        value["last_ts"] = msg.ts
        yield _change(record, msg, applied, values)
        if msg.type == "end":
            yield from _table_rows(value, "final", msg.ts)
            state.remove()
            return
        if value["applied"] % self.snapshot_every == 0:
            yield from _table_rows(value, "periodic", msg.ts)
        state.update(value)
        state.set_timeout_duration(self.idle_timeout)


def _date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d")


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def _change(record: dict[str, Any], msg: Message, applied: int, values: str | None) -> dict:
    return {"kind": "change", "site": msg.site, "date": _date(msg.ts), "session": msg.session,
            "seq": msg.seq, "applied_seq": applied, "op": msg.type, "row": msg.row,
            "values": values, "topic": record["topic"], "partition": record["partition"],
            "offset": record["offset"], "event_time": _time(msg.ts)}


def _table_rows(value: dict[str, Any], op: str, ts: int) -> Iterator[dict]:
    for row, values in sorted(value["table"].items()):
        yield {"kind": "snapshot", "site": value["site"], "date": _date(ts),
               "session": value["session"], "seq": value["applied"] - 1, "op": op, "row": row,
               "values": json.dumps(values, sort_keys=True, separators=(",", ":")),
               "event_time": _time(ts)}


def _dead_letter(record: dict[str, Any], reason: str, detail: str) -> dict:
    stamp = record.get("timestamp")
    when = stamp if isinstance(stamp, datetime.datetime) else datetime.datetime.now(datetime.UTC)
    topic = str(record["topic"])
    return {"kind": "dead_letter", "site": topic.rsplit("-", 1)[-1],
            "date": when.strftime("%Y-%m-%d"), "topic": topic,
            "partition": record["partition"], "offset": record["offset"], "reason": reason,
            "values": detail, "raw_value": record.get("value"), "event_time": when}
