"""RSS and PSS of running processes by mapped file, at one moment (session 22).

Usage: ``python3 smaps_by_file.py PID...`` (for instance every Python and Java process while
``scripts/bench --only smallbatch`` runs: ``$(pgrep python) $(pgrep java)``). For each process
prints its RSS and PSS in MiB and the six mappings (file names, ``[anon]``, ``[heap]``) with the
most RSS. A shared library that N processes map counts whole in each one's RSS and 1/N in each
one's PSS, which is why the benchmark's summed RSS overstates the job's memory.
"""

from __future__ import annotations

import collections
import os
import re
import sys

_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def by_file(pid: str) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """(RSS, PSS) in KiB of ``pid`` by mapped file name."""
    current = "[anon]"
    rss: collections.Counter[str] = collections.Counter()
    pss: collections.Counter[str] = collections.Counter()
    with open(f"/proc/{pid}/smaps") as handle:
        for line in handle:
            if _HEADER.match(line):
                parts = line.split(None, 5)
                current = os.path.basename(parts[5].strip()) if len(parts) > 5 else "[anon]"
            elif line.startswith("Rss:"):
                rss[current] += int(line.split()[1])
            elif line.startswith("Pss:"):
                pss[current] += int(line.split()[1])
    return rss, pss


def main(pids: list[str]) -> None:
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline") as handle:
                command = handle.read().replace("\0", " ")[:90]
            rss, pss = by_file(pid)
        except OSError:  # ended meanwhile
            continue
        print(f"== {pid} rss {sum(rss.values()) // 1024} pss {sum(pss.values()) // 1024} MiB: "
              f"{command}")
        for name, kib in rss.most_common(6):
            print(f"   {kib // 1024:4d} rss {pss[name] // 1024:4d} pss {name[:60]}")


if __name__ == "__main__":
    main(sys.argv[1:])
