"""Per batch of the smallbatch case, from Spark's event log: the stage's slower task and the
whole stage job (session 18).

Usage: ``python3 benchmarks/results/20261127-s18/stage_task_durations.py EVENT_LOG_DIR...``
where each folder is what ``BENCH_EVENT_LOG=<folder> scripts/bench --only smallbatch`` left.
Each micro-batch runs one job of two stages (the source's range task, then the ordered
stage's tasks); batch 0 (worker start) is left out. Prints the medians in milliseconds.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys


def events(folder: str) -> list[dict]:
    out: list[dict] = []
    for path in sorted(glob.glob(os.path.join(folder, "*", "events_*"))):
        with open(path) as handle:
            out += [json.loads(line) for line in handle]
    return out


def medians(folder: str) -> tuple[float, float, int]:
    jobs: dict[int, tuple[int, int]] = {}  # job id -> (submitted ms, the stage's id)
    for e in events(folder):
        if e["Event"] == "SparkListenerJobStart" and len(e["Stage IDs"]) == 2:
            description = (e.get("Properties") or {}).get("spark.job.description") or ""
            if "bench-small" in description:
                jobs[e["Job ID"]] = (e["Submission Time"], max(e["Stage IDs"]))
    stages = {stage for _, stage in jobs.values()}
    tasks: dict[int, list[int]] = {}
    job_ms: dict[int, int] = {}
    for e in events(folder):
        if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in stages:
            info = e["Task Info"]
            tasks.setdefault(e["Stage ID"], []).append(info["Finish Time"] - info["Launch Time"])
        elif e["Event"] == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            job_ms[e["Job ID"]] = e["Completion Time"] - jobs[e["Job ID"]][0]
    slowest = [max(tasks[s]) for s in sorted(tasks)][1:]
    whole = [job_ms[j] for j in sorted(job_ms)][1:]
    return statistics.median(slowest), statistics.median(whole), len(slowest)


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        task, job, n = medians(folder)
        print(f"{os.path.basename(folder.rstrip('/'))}: slower stage task median {task:.0f} ms, "
              f"stage job median {job:.0f} ms, {n} warm batches")
