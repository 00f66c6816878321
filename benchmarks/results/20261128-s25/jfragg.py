"""Java Flight Recorder execution samples of a JVM, summed (session 25).

Usage: start a recording on the running driver JVM (``jcmd <pid> JFR.start name=s
filename=rec.jfr settings=profile``, then ``jcmd <pid> JFR.dump name=s filename=rec.jfr``),
then ``python3 jfragg.py rec.jfr``. Prints the share of samples by thread, by the sampled
frame's package and method (self), and by every frame on the stack (inclusive).
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys


def _frames(event: dict) -> list[str]:
    trace = event["values"].get("stackTrace") or {}
    return [f"{f['method']['type']['name']}.{f['method']['name']}"
            for f in trace.get("frames", [])]


def _show(title: str, counts: collections.Counter, total: int, top: int) -> None:
    print(f"-- {title}")
    for name, count in counts.most_common(top):
        print(f"{count * 100 / total:5.1f}% {name}")


def main(path: str) -> None:
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "200", "--events",
                          "jdk.ExecutionSample", path], capture_output=True, text=True,
                         check=True).stdout
    events = json.loads(out)["recording"]["events"]
    threads: collections.Counter = collections.Counter()
    packages: collections.Counter = collections.Counter()
    methods: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    for event in events:
        thread = (event["values"].get("sampledThread") or {}).get("javaName") or "?"
        threads[thread[:40]] += 1
        names = _frames(event)
        if not names:
            continue
        methods[names[0]] += 1
        packages[".".join(names[0].split(".")[:3])] += 1
        inclusive.update(set(names))
    total = max(1, len(events))
    print("samples", len(events))
    _show("threads", threads, total, 15)
    _show("self by package", packages, total, 20)
    _show("self by method", methods, total, 25)
    _show("inclusive", inclusive, total, 60)


if __name__ == "__main__":
    main(sys.argv[1])
