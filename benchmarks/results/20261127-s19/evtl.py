"""A Spark event log's jobs, tasks and SQL executions in seconds from the streaming query's
start (session 19).

Usage: ``python3 evtl.py EVENT_LOG_DIR`` (a folder ``BENCH_EVENT_LOG=<folder>`` left).
"""

from __future__ import annotations

import datetime
import glob
import gzip
import json
import sys
from typing import Any


def events(folder: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(glob.glob(folder + "/*/events_*")):
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as handle:
            out += [json.loads(line) for line in handle]
    return out


def epoch_ms(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def main(folder: str) -> None:
    evs = events(folder)
    started = [e for e in evs if e["Event"].endswith("QueryStartedEvent")]
    if not started:
        raise SystemExit(f"{folder}: no streaming query in this event log")
    t0 = epoch_ms(started[0]["timestamp"])
    print("query started", started[0]["timestamp"])

    def at(ms: float) -> float:
        return round((ms - t0) / 1000, 3)

    for e in evs:
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            print(at(e["Submission Time"]), "job", e["Job ID"], e["Stage IDs"])
        elif kind == "SparkListenerJobEnd":
            print(at(e["Completion Time"]), "job end", e["Job ID"])
        elif kind == "SparkListenerTaskEnd":
            info = e["Task Info"]
            print(at(info["Launch Time"]), "task of stage", e["Stage ID"], "ms",
                  info["Finish Time"] - info["Launch Time"])
        elif kind.endswith("SQLExecutionStart"):
            text = (e.get("description") or "").split("\n")[0][:40]
            print(at(e["time"]), "sql start", e["executionId"], text)
        elif kind.endswith("SQLExecutionEnd"):
            print(at(e["time"]), "sql end", e["executionId"])
        elif kind.endswith("QueryProgressEvent"):
            progress = e["progress"]
            print(at(epoch_ms(progress["timestamp"])), "batch", progress["batchId"],
                  "trigger start; phases ms", progress["durationMs"])


if __name__ == "__main__":
    main(sys.argv[1])
