"""Where each warm small batch's time goes, from Spark's event log (session 24).

Usage: ``BENCH_EVENT_LOG=ev scripts/bench --size default --only smallbatch --out DIR`` (the
folder ``ev`` must exist), then ``python3 batch_timeline.py ev``. Prints, per batch from batch
2 on, in ms from the trigger's start: the batch's total, its job's submission and end, and
each task's [launch-finish] by stage (the source's range task, then the stage's tasks).
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import sys
from typing import Any


def _ms(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def main(folder: str) -> None:
    events: list[dict[str, Any]] = []
    for path in sorted(glob.glob(os.path.join(folder, "*", "events_*"))):
        with open(path) as handle:
            events += [json.loads(line) for line in handle]
    jobs = {e["Job ID"]: e for e in events if e["Event"] == "SparkListenerJobStart"}
    ends = {e["Job ID"]: e["Completion Time"] for e in events
            if e["Event"] == "SparkListenerJobEnd"}
    job_of = {stage: job for job, e in jobs.items() for stage in e["Stage IDs"]}
    tasks: dict[int, list[tuple[int, int, int]]] = {}
    for e in events:
        if e["Event"] == "SparkListenerTaskEnd":
            info = e["Task Info"]
            tasks.setdefault(job_of.get(e["Stage ID"], -1), []).append(
                (e["Stage ID"], info["Launch Time"], info["Finish Time"]))
    for e in events:
        if not e["Event"].endswith("QueryProgressEvent"):
            continue
        progress = e["progress"]
        if progress["batchId"] < 2:
            continue
        start = _ms(progress["timestamp"])
        end = start + progress["durationMs"]["triggerExecution"]
        line = [f"b{progress['batchId']}", f"total {end - start:.0f}"]
        for job, started in jobs.items():
            if not start <= started["Submission Time"] <= end:
                continue
            spans = ",".join(f"s{stage}[{a - start:.0f}-{b - start:.0f}]"
                             for stage, a, b in sorted(tasks.get(job, []), key=lambda t: t[1]))
            line.append(f"job{job}: submit +{started['Submission Time'] - start:.0f} "
                        f"end +{ends.get(job, 0) - start:.0f} tasks {spans}")
        print("  ".join(line))


if __name__ == "__main__":
    main(sys.argv[1])
