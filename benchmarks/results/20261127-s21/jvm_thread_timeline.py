"""CPU of the Spark driver JVM's threads, per warm batch (names with digits folded to ``#``).

Usage: ``python3 jvm_thread_timeline.py STOP_FILE OUT.jsonl &``, the benchmark with
``BENCH_EVENT_LOG=<folder>``, ``touch STOP_FILE``; then ``python3 jvm_thread_timeline.py
--window OUT.jsonl EVENT_LOG_FOLDER``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import time

from cpu_timeline import window_samples

TICK = os.sysconf("SC_CLK_TCK")


def spark_jvm() -> int | None:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    cmd = handle.read()
            except OSError:
                continue
            if b"SparkSubmit" in cmd and b"java" in cmd:
                return int(pid)
    return None


def sample(stop: str, out: str) -> None:
    with open(out, "w") as handle:
        while not os.path.exists(stop):
            pid = spark_jvm()
            threads = {}
            for tid in os.listdir(f"/proc/{pid}/task") if pid else []:
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                        text = stat.read()
                except OSError:
                    continue
                fields = text.rsplit(")", 1)[1].split()
                threads[tid] = [text[text.index("(") + 1:text.rindex(")")],
                                (int(fields[11]) + int(fields[12])) / TICK]
            if threads:
                handle.write(json.dumps([time.time(), threads]) + "\n")
            time.sleep(0.25)


def window(timeline: str, events: str) -> None:
    a, b, batches, _ = window_samples(timeline, events)
    spent: collections.Counter[str] = collections.Counter()
    for tid, (name, cpu) in b[1].items():
        spent[re.sub(r"\d+", "#", name)] += cpu - a[1].get(tid, [name, 0.0])[1]
    print(f"{batches} warm batches; driver JVM CPU per batch by thread, ms:")
    for name, cpu in spent.most_common(12):
        print(f"  {1000 * cpu / batches:7.1f}  {name}")


if __name__ == "__main__":
    if sys.argv[1] == "--window":
        window(sys.argv[2], sys.argv[3])
    else:
        sample(sys.argv[1], sys.argv[2])
