"""Where the time of one peer run's processes went, from py-spy's collapsed stacks (session 31).

``workers-pyspy.txt.gz``: ``py-spy record --pid <the stage's worker daemon> --subprocesses
--nonblocking -r 400 -f raw`` over one default-size peer run (the workers ran about 1.8x slower
under the sampler: not a timing run). Split with session 28's categories, the daemon's and
the worker manager's idle loops apart. ``driver-pyspy.txt.gz``: ``py-spy record --pid <the
engine's driver> --nonblocking --idle -r 200 -f raw``: wall time of the driver's calls from
the session's start to its stop (mostly waiting on the JVM through py4j).

Usage: ``python3 benchmarks/results/20261128-s31/pyspy_split.py``
"""

from __future__ import annotations

import collections
import gzip
import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "worker_split_s28", HERE.parent / "20261128-s28" / "worker_split.py")
assert _spec is not None and _spec.loader is not None
_s28 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s28)


def _stacks(name: str) -> list[tuple[list[str], int]]:
    with gzip.open(HERE / name, "rt") as handle:
        out = []
        for line in handle:
            stack, number = line.rsplit(" ", 1)
            out.append((stack.split(";"), int(number)))
        return out


def workers() -> None:
    counts: collections.Counter[str] = collections.Counter()
    for frames, samples in _stacks("workers-pyspy.txt.gz"):
        stack = ";".join(frames)
        name = next((n for n, pattern in _s28.CATEGORIES if pattern in stack), None)
        if name is None:
            bare = [f.split(" (")[0] for f in frames if not f.startswith("process ")]
            name = ("idle: the daemon's and worker manager's loops"
                    if not bare or bare[-1] in ("manager", "main") else "pyspark's worker")
        counts[name] += samples
    total = sum(counts.values())
    print(f"the stage's workers: {total} samples")
    for name, samples in counts.most_common():
        print(f"{samples:6d} {100 * samples / total:5.1f}%  {name}")


def driver(depth: int = 3) -> None:
    counts: collections.Counter[str] = collections.Counter()
    for frames, samples in _stacks("driver-pyspy.txt.gz"):
        names = [f.split(" (")[0] for f in frames]
        if "engine_main" in names:
            at = names.index("engine_main")
            counts[";".join(names[at + 1:at + 1 + depth])] += samples
    print("\nthe driver's wall time under engine_main (200 samples a second)")
    for name, samples in counts.most_common(12):
        print(f"{samples / 200:6.2f} s  {name}")


if __name__ == "__main__":
    workers()
    driver()
