"""Samples the RSS of the stage's worker daemon and its workers during a run (session 29).

Usage: ``python workers_rss.py OUT.csv SECONDS`` beside a benchmark run; one line per process
every 0.2 s: epoch seconds, pid, parent pid, RSS MiB, anonymous MiB, threads
(``large-*/workers-rss.csv``).
"""

from __future__ import annotations

import sys
import time

import psutil


def anonymous_mib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        return next((int(line.split()[1]) >> 10 for line in rollup
                     if line.startswith("Anonymous:")), 0)


def main(path: str, seconds: float) -> None:
    end = time.time() + seconds
    with open(path, "w") as out:
        while time.time() < end:
            for proc in psutil.process_iter(["pid", "cmdline", "ppid"]):
                if "orderedstream.core.pydaemon" not in (proc.info["cmdline"] or []):
                    continue
                try:
                    line = (f"{time.time():.2f},{proc.pid},{proc.info['ppid']},"
                            f"{proc.memory_info().rss >> 20},{anonymous_mib(proc.pid)},"
                            f"{proc.num_threads()}\n")
                except (psutil.Error, OSError):
                    continue
                out.write(line)
            out.flush()
            time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
