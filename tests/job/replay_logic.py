"""A deliberately changed version of the main job's logic, for the replay tests (imported by
``orderedstream replay --function tests.job.replay_logic:changed`` in a subprocess)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orderedstream.app.job.sessions import SessionLogic


@dataclass(frozen=True)
class ChangedLogic(SessionLogic):
    """Like ``SessionLogic``, but update changes say ``UPDATE`` and dead letters are dropped:
    a replay must report every committed update row as changed and every dead letter as
    removed, and nothing else (the state is the same)."""

    def __call__(self, key: Any, record: dict[str, Any] | None, state: Any) -> Iterator[dict]:
        for row in super().__call__(key, record, state):
            if row["kind"] == "dead_letter":
                continue
            if row["kind"] == "change" and row.get("op") == "update":
                row = {**row, "op": "UPDATE"}
            yield row


IDLE_TIMEOUT = "2 seconds"
changed = ChangedLogic(idle_timeout=IDLE_TIMEOUT)
