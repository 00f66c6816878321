"""CPU seconds by process over the window of an event log's longest Spark stage (session 19).

Usage: ``python3 window.py EVENT_LOG_DIR CPU_TRACE`` (the trace from ``cpu_trace.py``, plain or
gzipped). In the peer case the longest stage is the ordered stage of the one batch.
"""

from __future__ import annotations

import collections
import gzip
import json
import sys
from typing import Any

from evtl import events


def label(command: str, pid: int) -> str:
    if not command:
        return f"(kernel thread) {pid}"
    if command.split()[0].endswith("java"):  # the broker's log4j file sits in the pack's tree
        return "kafka broker (java)" if "-Xmx768m" in command else "spark driver (java)"
    words = command.split()
    return f"{words[0].rsplit('/', 1)[-1]} {' '.join(words[1:4])}"[:80]


def main(folder: str, trace: str) -> None:
    spans: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    for e in events(folder):
        if e["Event"] == "SparkListenerTaskEnd":
            info = e["Task Info"]
            spans[e["Stage ID"]].append((info["Launch Time"] / 1000, info["Finish Time"] / 1000))

    def length(stage: int) -> float:
        return max(f for _, f in spans[stage]) - min(s for s, _ in spans[stage])

    stage = max(spans, key=length)
    first, last = min(s for s, _ in spans[stage]), max(f for _, f in spans[stage])
    with (gzip.open(trace, "rt") if trace.endswith(".gz") else open(trace)) as handle:
        samples: list[Any] = [json.loads(line) for line in handle]
    start = min(samples, key=lambda s: abs(s[0] - first))
    end = min(samples, key=lambda s: abs(s[0] - last))
    before = {(pid, cmd): cpu for pid, cmd, cpu in start[1]}
    used: collections.Counter[str] = collections.Counter()
    for pid, cmd, cpu in end[1]:
        spent = cpu - before.get((pid, cmd), 0)
        if spent > 0.02:
            used[label(cmd, pid)] += spent
    wall = end[0] - start[0]
    print(f"stage {stage}: {last - first:.2f} s (trace window {wall:.2f} s)")
    for name, cpu in used.most_common(12):
        print(f"{cpu:6.2f} CPU-s  {name}")
    print(f"{sum(used.values()):6.2f} CPU-s of {2 * wall:.2f} on 2 cores")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
