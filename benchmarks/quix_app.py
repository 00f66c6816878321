"""The main job written with Quix Streams: the ``peer`` benchmark's other engine.

Runs in Quix Streams' own virtualenv (``benchmarks.cases.peer`` creates it), not in the pack's:
``<quix-venv>/bin/python benchmarks/quix_app.py PARAMS.json``. Only ``orderedstream.app.job``
(the capture-session logic, pure Python) is imported from the pack, through ``src/`` on the
path, so both engines run the very same ``SessionLogic``.

One process, exactly-once (Kafka transactions), RocksDB state with changelog topics (Quix's
defaults), Parquet files on local disk (``LocalFileSink``). Rows carry every output field
(missing ones None) because Quix's Parquet format infers each file's schema from its rows.
Writes a JSON result: records, seconds (``app.run`` minus its idle timeout), last record time.
With ``flush_log`` in the parameters (the ``steady`` case) it runs until SIGTERM, commits every
``commit_interval`` seconds and appends one JSON line per sink flush: when the flush ended and
each partition's end offset it wrote (when those records became visible).
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from quixstreams import Application, message_context  # noqa: E402
from quixstreams.sinks.community.file.local import LocalFileSink  # noqa: E402

from orderedstream.app.job.sessions import OUTPUT_SCHEMA, SessionLogic  # noqa: E402

FIELDS = tuple(OUTPUT_SCHEMA.names)


class QuixGroupState:
    """This pack's ``GroupState`` calls (as ``SessionLogic`` makes them) on Quix's per-key
    ``State`` (JSON values). Quix has no per-key timers: ``set_timeout_duration`` is kept
    and ignored (no timeout fires in a run shorter than the idle timeout, in either engine)."""

    has_timed_out = False

    def __init__(self, state: Any) -> None:
        self._state = state

    @property
    def exists(self) -> bool:
        return bool(self._state.exists("v"))

    def get(self) -> Any:
        return self._state.get("v")

    def update(self, value: Any) -> None:
        self._state.set("v", value)

    def remove(self) -> None:
        self._state.delete("v")

    def set_timeout_duration(self, duration: Any) -> None:
        pass


class FlushLoggingSink(LocalFileSink):
    """``LocalFileSink`` that appends ``{"t": epoch seconds, "ends": [[topic, partition,
    end offset], ...]}`` to ``log`` after each flush (Quix flushes its sinks at a commit)."""

    def __init__(self, log: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._log = open(log, "a")  # noqa: SIM115 - open for the process's life

    def flush(self) -> None:
        ends = [[t, p, max(item.offset for item in batch) + 1]
                for (t, p), batch in self._batches.items() if batch.size]
        super().flush()
        if ends:
            self._log.write(json.dumps({"t": time.time(), "ends": ends}) + "\n")
            self._log.flush()


def main() -> None:
    params = json.loads(Path(sys.argv[1]).read_text())
    logic = SessionLogic(params["snapshot_every"], params["idle_timeout"])
    expected = int(params["records"])
    seen = {"n": 0, "last": 0.0}

    def sessions(value: bytes, key: bytes, timestamp: int, headers: Any,
                 state: Any) -> list[dict[str, Any]]:
        ctx = message_context()
        record = {"key": key, "value": value, "topic": ctx.topic, "partition": ctx.partition,
                  "offset": ctx.offset,
                  "timestamp": datetime.datetime.fromtimestamp(timestamp / 1000,
                                                               datetime.UTC)}
        rows = [{f: row.get(f) for f in FIELDS}
                for row in logic(key, record, QuixGroupState(state))]
        seen["n"] += 1
        if seen["n"] == expected:
            seen["last"] = time.perf_counter()
        return rows

    steady = "flush_log" in params
    app = Application(broker_address=params["bootstrap"], consumer_group=params["group"],
                      auto_offset_reset="earliest", processing_guarantee="exactly-once",
                      state_dir=params["state_dir"], loglevel="WARNING",
                      commit_interval=float(params.get("commit_interval", 5.0)))
    sink = (FlushLoggingSink(params["flush_log"], directory=params["output_dir"],
                             format="parquet") if steady
            else LocalFileSink(directory=params["output_dir"], format="parquet"))
    for name in params["topics"]:
        topic = app.topic(name, key_deserializer="bytes", value_deserializer="bytes")
        sdf = app.dataframe(topic)
        sdf = sdf.apply(sessions, stateful=True, expand=True, metadata=True)
        sdf.sink(sink)
    idle = 0.0 if steady else float(params["idle_s"])
    started = time.perf_counter()
    if steady:
        app.run()  # until SIGTERM (Quix stops gracefully: a last commit)
    else:
        app.run(timeout=idle)
    ended = time.perf_counter()
    Path(params["result"]).write_text(json.dumps({
        "records": seen["n"], "seconds": ended - started - idle,
        "seconds_to_last_record": (seen["last"] - started) if seen["last"] else None}))


if __name__ == "__main__":
    main()
