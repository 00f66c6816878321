"""CPU of the imports in the Python processes Spark starts for a session's Data Source steps.

Usage: ``.venv/bin/python benchmarks/results/20261127-s20/planner_imports.py [--rounds 5]``

For each of Spark's process modules (the lookup of Python Data Sources, ``load()``'s create
step, the read planner and the streaming source runner), a fresh interpreter imports the module
alone, then the module with what the pack adds in that process: the four ``pyspark_*``
registrations in the lookup, the ``orderedkafka`` source in the others (and its schema in the
create step). Prints the best of ``--rounds`` user + system CPU seconds of each.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys

REGISTRATIONS = ("pyspark_orderedkafka, pyspark_fenceddelta, pyspark_fencedparquet, "
                 "pyspark_rocksstate")
OPTIONS = "{'kafka.bootstrap.servers': '127.0.0.1:9', 'subscribe': 't', 'emit': 'ranges'}"
CASES = [
    ("lookup", "import pyspark.sql.worker.lookup_data_sources",
     f"import {REGISTRATIONS}"),
    ("create", "import pyspark.sql.worker.create_data_source",
     f"import pyspark_orderedkafka as m; m.DefaultSource(options={OPTIONS}).schema()"),
    ("read planner", "import pyspark.sql.worker.plan_data_source_read",
     "import orderedstream.python_datasource.source"),
    ("source runner", "import pyspark.sql.streaming.python_streaming_source_runner",
     "import orderedstream.python_datasource.source"),
]


def cpu(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("| Spark's process | its module alone (CPU-s) | with the pack's part (CPU-s) |")
    print("|---|---|---|")
    for name, alone, ours in CASES:
        a = min(cpu(alone) for _ in range(args.rounds))
        b = min(cpu(f"{alone}; {ours}") for _ in range(args.rounds))
        print(f"| {name} | {a:.2f} | {b:.2f} |")


if __name__ == "__main__":
    main()
