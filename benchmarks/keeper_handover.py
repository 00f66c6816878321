"""How long a state partition's hand-over between two Python workers takes when the process
keeping it open is busy in Python code (a stage worker running the user's function).

Usage: ``.venv/bin/python -m benchmarks.keeper_handover [--interval S] [--handovers N]``

A child process keeps ``N`` local copies open (``statestore.rocksdb.keepopen``, stand-in DBs
whose close is free, so only the hand-over's own cost is timed) and then spins in pure Python,
holding the GIL as a user function does; this process asks it for each copy in turn
(``release_elsewhere``, what an opener in the other worker does) and prints the median and p90
wall time. ``--interval``: the child's ``sys.setswitchinterval`` (0: CPython's default, 5 ms).
Session 38 measured 11.3 ms median at 5 ms and 1.8-3.0 ms at 1 ms; with the workers at 1 ms
the small batch's "not kept" open stayed at 22-25 ms (not the hand-over's wait, then) and the
batch was no faster, so the interval was left at its default
(``benchmarks/results/20261201-s38/README.md``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from orderedstream.statestore.rocksdb import keepopen


class _FreeDB:
    def close(self) -> None:
        pass


def _keeper(folder: str, copies: int, interval: float, spin_s: float) -> None:
    for i in range(copies):
        copy = os.path.join(folder, f"copy{i}")
        os.makedirs(copy, exist_ok=True)
        keepopen.keep(copy, keepopen.Kept(db=_FreeDB(), families={}, db_name="db", version=1,
                                          manifest=None, fingerprint="-"), copies)
    if interval:
        sys.setswitchinterval(interval)
    print(f"ready {sys.getswitchinterval()}", flush=True)
    began, total = time.monotonic(), 0
    while time.monotonic() - began < spin_s:  # Python work holding the GIL
        for j in range(1000):
            total += j * j


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.0)
    parser.add_argument("--handovers", type=int, default=40)
    parser.add_argument("--keeper", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keeper:
        _keeper(args.keeper, args.handovers, args.interval, spin_s=30.0)
        return
    folder = tempfile.mkdtemp(prefix="keeper-handover-")
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.keeper_handover", "--keeper",
                              folder, "--handovers", str(args.handovers),
                              "--interval", str(args.interval)], stdout=subprocess.PIPE,
                             text=True)
    try:
        interval = float(child.stdout.readline().split()[1])  # type: ignore[union-attr]
        time.sleep(0.3)
        times = []
        for i in range(args.handovers):
            began = time.perf_counter()
            keepopen.release_elsewhere(os.path.join(folder, f"copy{i}"), timeout_s=10.0,
                                       what="benchmark copy")
            times.append((time.perf_counter() - began) * 1e3)
            time.sleep(0.02)
    finally:
        child.kill()
        child.wait()
        shutil.rmtree(folder, ignore_errors=True)
    times.sort()
    print(f"keeper's switch interval {interval * 1e3:g} ms: hand-over median "
          f"{times[len(times) // 2]:.2f} ms, p90 {times[int(len(times) * 0.9)]:.2f} ms "
          f"({len(times)} hand-overs)")


if __name__ == "__main__":
    main()
