"""Where the stage's Python workers' time went in one peer run (session 28).

``workers-pyspy.txt.gz``: py-spy's collapsed stacks (``py-spy record --pid <daemon>
--subprocesses --nonblocking -r 400 -f raw``) of the two Spark Python workers of a default-size
peer run. Each sample is put in the first matching category, in this order.

Usage: ``python3 benchmarks/results/20261128-s28/worker_split.py``
"""

from __future__ import annotations

import collections
import gzip
from pathlib import Path

CATEGORIES = (
    ("user function (SessionLogic)", "SessionLogic.__call__"),
    ("imports in the worker (the warm-up's)", "_find_and_load"),
    ("rows -> Arrow (to_batch)", "to_batch (orderedstream/statestore/ordered/rows.py"),
    ("Parquet encoder and upload threads", "Thread._bootstrap"),
    ("decode (RecordDecoder)", "RecordDecoder.decode"),
    ("Kafka read (native reader)", "RangeReader.batches"),
    ("state open", "open_partition"),
    ("ordered loop, the rest", "PartitionRun.outputs"),
    ("task, the rest (output files, commit message)", "StageTask.__call__"),
)


def main() -> None:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    with gzip.open(Path(__file__).with_name("workers-pyspy.txt.gz"), "rt") as stacks:
        for line in stacks:
            stack, number = line.rsplit(" ", 1)
            samples = int(number)
            total += samples
            name = next((n for n, pattern in CATEGORIES if pattern in stack),
                        "pyspark's worker and daemon")
            counts[name] += samples
    for name, samples in counts.most_common():
        print(f"{samples:5d} {100 * samples / total:5.1f}%  {name}")
    print(f"{total:5d} samples")


if __name__ == "__main__":
    main()
