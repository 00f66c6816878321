"""Every process's CPU (user + system) by kind, sampled every 0.25 s, for a window per batch.

Usage: ``python3 cpu_timeline.py STOP_FILE OUT.jsonl &`` then the benchmark (with
``BENCH_EVENT_LOG=<folder>``), then ``touch STOP_FILE``; then ``python3 cpu_timeline.py --window
OUT.jsonl EVENT_LOG_FOLDER`` prints the CPU each kind of process spent per warm batch (batch 2
to the last), from Spark's event log's progress events. Kinds: the Kafka broker, SeaweedFS, the
Spark driver JVM, the stage's Python workers, other pyspark processes, and Python processes by
command line.
"""

from __future__ import annotations

import collections
import datetime
import glob
import json
import os
import sys
import time
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


def kind(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmd = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if "weed" in cmd:
        return "seaweedfs"
    if "java" in cmd:
        return "kafka" if "kafka" in cmd else "spark-jvm"
    if "pydaemon" in cmd:
        return "stage workers"
    if "pyspark" in cmd or "forkserve" in cmd or "forkclient" in cmd:
        return "spark's other python"
    if "python" in cmd:
        return "python: " + cmd[:60]
    return None


def sample(stop: str, out: str) -> None:
    seen: dict[str, tuple[str | None, float]] = {}
    with open(out, "w") as handle:
        while not os.path.exists(stop):
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                cpu = (int(fields[11]) + int(fields[12])) / TICK
                known = seen.get(pid)
                seen[pid] = (known[0] if known else kind(pid), cpu)
            totals: collections.Counter[str] = collections.Counter()
            for name, cpu in seen.values():
                if name is not None:
                    totals[name] += cpu
            handle.write(json.dumps([time.time(), totals]) + "\n")
            time.sleep(0.25)


def window_bounds(events: str) -> tuple[float, float, int]:
    """(start, end, batches) of the warm batches (2 to the last) in Spark's event log."""
    progress = []
    for path in glob.glob(f"{events}/*/events_*"):
        with open(path) as handle:
            for line in handle:
                event = json.loads(line)
                if event["Event"].endswith("QueryProgressEvent"):
                    progress.append(event["progress"])
    progress.sort(key=lambda p: p["batchId"])

    def epoch(text: str) -> float:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    first, last = progress[2], progress[-1]
    t1 = epoch(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000
    return epoch(first["timestamp"]), t1, last["batchId"] - first["batchId"] + 1


def window_samples(timeline: str, events: str) -> tuple[Any, Any, int, float]:
    """The timeline's samples nearest the warm batches' start and end, the batches, the
    seconds between."""
    t0, t1, batches = window_bounds(events)
    with open(timeline) as handle:
        samples = [json.loads(line) for line in handle]
    a = min(samples, key=lambda s: abs(s[0] - t0))
    b = min(samples, key=lambda s: abs(s[0] - t1))
    return a, b, batches, t1 - t0


def window(timeline: str, events: str) -> None:
    a, b, batches, seconds = window_samples(timeline, events)
    print(f"{batches} warm batches in {seconds:.2f} s; CPU per batch, ms:")
    for name in sorted(b[1], key=lambda n: a[1].get(n, 0) - b[1][n]):
        spent = b[1][name] - a[1].get(name, 0)
        if spent > 0:
            print(f"  {1000 * spent / batches:7.1f}  {name}")


if __name__ == "__main__":
    if sys.argv[1] == "--window":
        window(sys.argv[2], sys.argv[3])
    else:
        sample(sys.argv[1], sys.argv[2])
