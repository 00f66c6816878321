"""Batch 0 of peer runs: the stage's span and, per stage task, its time outside the records.

Usage: python3 benchmarks/results/20261128-s32/stage_spans.py RUN_FOLDER...
Reads each folder's peer.json (its timeline: Spark's phases and every Kafka partition's task
figures, seconds from start_job). Per task: the span from its first partition's start to its
last one's end, the sum of its partitions' process_s less their lock_wait_s (the records and
output; the pipelined experiment's runs record the wait), and the rest (head reads, state
opens and commits between partitions).
"""

from __future__ import annotations

import collections
import json
import sys


def main(folders: list[str]) -> None:
    for folder in folders:
        peer = json.load(open(f"{folder}/peer.json"))
        extra = peer[0]["extra"]
        timeline = extra["timeline"]
        parts = list(timeline["partitions"].values())
        start = min(p["start_s"] for p in parts)
        end = max(p["start_s"] + p["open_s"] + p["process_s"] + p["commit_s"] for p in parts)
        ratio = peer[1]["ours"] / peer[1]["baseline"]
        print(f"{folder.rstrip('/').split('/')[-1]:8} ours {extra['ours_s']:.2f} s, Quix "
              f"{extra['quix_s']:.2f} s, per core {ratio:.2f}x, stage {end - start:.2f} s")
        tasks = collections.defaultdict(list)
        for p in parts:
            tasks[p["pid"]].append(p)
        for pid, ps in sorted(tasks.items()):
            first = min(p["start_s"] for p in ps)
            last = max(p["start_s"] + p["open_s"] + p["process_s"] + p["commit_s"] for p in ps)
            records = sum(p["process_s"] - p.get("lock_wait_s", 0.0) for p in ps)
            print(f"    task {pid}: span {last - first:.2f} s, records {records:.2f} s, "
                  f"rest {last - first - records:.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
