"""Session 30: each run's CPU counted two ways, the engine's own cgroup (exact: every process,
however short-lived) and the psutil samples every 0.25 s that earlier sessions reported, and
the pack's overhead per record from each. Usage: ``python3 cpu.py DIR...`` (run folders of
``scripts/bench --only smallbatch,peer``); the other columns: ``../20261128-s27/table.py``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

_spec = importlib.util.spec_from_file_location(
    "table27", os.path.join(os.path.dirname(__file__), "..", "20261128-s27", "table.py"))
assert _spec is not None and _spec.loader is not None
table27 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table27)


def main(folders: list[str]) -> None:
    print("| run | ours CPU-s exact / sampled | Quix CPU-s exact / sampled | overhead us exact / "
          "sampled (user fn us) | Quix above the function us |")
    print("|---|---|---|---|---|")
    for folder in folders:
        peer = table27.load(os.path.join(folder, "peer.json"))
        cpu, over = peer["CPU seconds"], peer["pack overhead per record"]
        records = cpu["ours"] * 1e6 / over["extra"]["ours_us"]
        fn = over["extra"]["user_function_us"]
        sampled_us = cpu["extra"]["ours_sampled_s"] * 1e6 / records - fn
        print(f"| {os.path.basename(folder.rstrip('/'))} | {cpu['ours']:.2f} / "
              f"{cpu['extra']['ours_sampled_s']:.2f} | {cpu['baseline']:.2f} / "
              f"{cpu['extra']['quix_sampled_s']:.2f} | {over['ours']:.1f} / {sampled_us:.1f} "
              f"({fn:.1f}) | {over['extra']['quix_overhead_us']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
