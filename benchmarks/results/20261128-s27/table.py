"""One line per benchmark run folder (``scripts/bench --only smallbatch,peer --out DIR``): the
peer's wall seconds, per-core ratio, CPU (the JVM's part) and RSS, the pack's overhead per
record above the user function measured in the run (when the run has it), the small batch's
p50/p95, first commit and RSS (session 27). Usage: ``python3 table.py DIR...``
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def load(path: str) -> dict[str, Any]:
    with open(path) as handle:
        rows = json.load(handle)
    rows = rows if isinstance(rows, list) else rows.get("results", rows)
    return {row["metric"]: row for row in rows}


def main(folders: list[str]) -> None:
    print("| run | ours s | Quix s | per core | CPU-s ours / Quix | JVM CPU-s | overhead us "
          "(user fn us) | peer RSS | small p50 | small p95 | first commit | small RSS | "
          "rows differing |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for folder in folders:
        peer = load(os.path.join(folder, "peer.json"))
        small = load(os.path.join(folder, "smallbatch.json"))
        e = peer["records/s"]["extra"]
        jvm = peer["CPU seconds"]["extra"]["ours_by_process"].get("jvm", "-")
        over = peer.get("pack overhead per record")
        overhead = (f"{over['ours']:.1f} ({over['extra']['user_function_us']:.1f})"
                    if over else "-")
        print(f"| {os.path.basename(folder.rstrip('/'))} | {e['ours_s']} | {e['quix_s']} | "
              f"{peer['records/s per core']['ratio']:.2f}x | {e['ours_cpu_s']} / "
              f"{e['quix_cpu_s']} | {jvm} | {overhead} | {peer['peak RSS']['ours']:.0f} | "
              f"{small['batch duration p50']['ours']:.0f} | "
              f"{small['batch duration p95']['ours']:.0f} | "
              f"{small['start to first committed batch']['ours']:.2f} | "
              f"{small['peak RSS']['ours']:.0f} | {e['rows_differing']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
