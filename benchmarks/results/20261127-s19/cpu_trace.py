"""Every process's CPU seconds (user + system) every 0.2 s, as JSON lines (session 19).

Usage: ``python cpu_trace.py OUT.jsonl SECONDS``, started beside a benchmark run; each line is
``[unix time, [[pid, command line (140 chars), cpu seconds], ...]]``. Needs psutil.
"""

from __future__ import annotations

import json
import sys
import time

import psutil


def main(out_path: str, seconds: float) -> None:
    began = time.time()
    with open(out_path, "w") as out:
        while time.time() - began < seconds:
            rows = []
            for proc in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
                try:
                    line = " ".join(proc.info["cmdline"] or [])
                    times = proc.info["cpu_times"]
                except psutil.Error:
                    continue
                if times is None or "cpu_trace" in line:
                    continue
                total = times.user + times.system
                if total >= 0.05:
                    rows.append((proc.info["pid"], line[:140], round(total, 2)))
            out.write(json.dumps([round(time.time(), 3), rows]) + "\n")
            out.flush()
            time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
