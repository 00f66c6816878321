"""CPU by thread of every Spark driver JVM (``SparkSubmit``) that runs while this samples.

Usage: ``.venv/bin/python benchmarks/results/20261127-s20/jvm_thread_cpu.py > OUT &`` then the
benchmark, then ``pkill -TERM -f jvm_thread_cpu.py``: prints, per JVM, its threads' CPU seconds
summed by name (digits folded to ``#``; Linux keeps 15 characters of a name): JIT compiler
threads, py4j's connection threads (``Thread-#``: the calls the driver's Python makes, among
them ``SparkContext``'s start), task threads, the stream execution thread, the VM thread (GC).
"""

from __future__ import annotations

import collections
import os
import re
import signal
import time

HZ = os.sysconf("SC_CLK_TCK")


def spark_jvms() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmd = handle.read()
        except OSError:
            continue
        if b"SparkSubmit" in cmd and b"java" in cmd:
            found.append(int(entry))
    return found


def main() -> None:
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    seen: dict[tuple[int, int], tuple[str, float]] = {}
    while not stop[0]:
        for pid in spark_jvms():
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                        stat = handle.read()
                except OSError:
                    continue
                name = stat[stat.index("(") + 1:stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2:].split()
                seen[(pid, int(tid))] = (name, (int(fields[11]) + int(fields[12])) / HZ)
        time.sleep(0.1)
    by_jvm: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for (pid, _), (name, cpu) in seen.items():
        by_jvm[pid][re.sub(r"\d+", "#", name)] += cpu
    for pid, threads in by_jvm.items():
        print(f"JVM {pid}: {sum(threads.values()):.2f} CPU-s")
        for name, cpu in threads.most_common(12):
            print(f"  {cpu:6.2f} {name}")


if __name__ == "__main__":
    main()
