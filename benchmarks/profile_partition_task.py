"""The ordered stage's fixed cost per Kafka partition and batch, without Spark or Kafka.

Usage: ``.venv/bin/python -m benchmarks.profile_partition_task [--partitions 6]
[--batches 15] [--records 100] [--changelog [--inline-bytes N]] [--keep-open N] [--profile]``

What a small batch's stage task does per Kafka partition, in one process as a reused Spark
worker runs them: open the partition's state at the previous batch's version (local copy
reused), run ``SessionLogic`` over ``--records`` records, write the output files (Delta add
files, partitioned as the main job's) and prepare the state candidate, with state and output
on a local SeaweedFS S3. Batches run one after another, each one's bases taken from the
previous one's commits. Prints the medians over the batches after the first two: wall and CPU
per partition task and the task's own phases (state open, records + output files, state
candidate), the thread starts per task, and the SST files of a partition's local copy at the
end. ``--profile`` adds cProfile's top functions (``PROFILE_SORT``, ``PROFILE_TOP``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.profile_ordered_task import COLUMNS, build_input


def _count_thread_starts() -> list[int]:
    """Counts ``threading.Thread.start`` calls from now on (a one-element list)."""
    counter = [0]
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        counter[0] += 1
        start(self)

    threading.Thread.start = counted  # type: ignore[method-assign]
    return counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--records", type=int, default=100, help="per partition and batch")
    parser.add_argument("--changelog", action="store_true", help="the store's changelog mode")
    parser.add_argument("--inline-bytes", type=int, default=None,
                        help="changelog_inline_bytes (0: every log its own object)")
    parser.add_argument("--keep-open", type=int, default=None,
                        help="keep_open (0: every partition closed after its task)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    from orderedstream.app.job.sessions import OUTPUT_SCHEMA, PARTITION_BY, SessionLogic
    from orderedstream.dev.services.s3 import S3Server
    from orderedstream.statestore.ordered import OrderedStateful, ProcessingTimeTimeout
    from orderedstream.statestore.ordered.plan import BatchPlan, PartitionBase, PartitionCommit
    from orderedstream.statestore.ordered.runner import OrderedTask

    work = Path(tempfile.mkdtemp(prefix="partition-task-"))
    s3 = S3Server(work / "s3").start()
    try:
        n = args.records
        table = pa.Table.from_batches(build_input(args.partitions * args.batches * n))
        store_options: dict[str, Any] = {"local_dir": str(work / "local")}
        if args.changelog:
            store_options["changelog"] = True
        if args.inline_bytes is not None:
            store_options["changelog_inline_bytes"] = args.inline_bytes
        if args.keep_open is not None:
            store_options["keep_open"] = args.keep_open
        stage = OrderedStateful(SessionLogic(100, "10 minutes"), state_location=s3.url("state"),
                                output=s3.url("out"), output_schema=OUTPUT_SCHEMA, key="key",
                                timeout=ProcessingTimeTimeout(), columns=COLUMNS,
                                storage_options=s3.storage_options, store_options=store_options,
                                writer_options={"partitionBy": list(PARTITION_BY)})
        bases: dict[str, PartitionBase] = {}
        figures: list[tuple[float, ...]] = []
        starts = _count_thread_starts()
        started_threads = 0
        profiler = cProfile.Profile() if args.profile else None
        for batch in range(args.batches):
            task = OrderedTask(stage.options, stage.func,
                               BatchPlan(batch, int(time.time() * 1000), bases=dict(bases)),
                               stage.sink)
            for p in range(args.partitions):
                part = table.slice((batch * args.partitions + p) * n, n)
                part = part.set_column(part.schema.get_field_index("partition"), "partition",
                                       pa.array([p] * n, pa.int32()))
                part = part.set_column(part.schema.get_field_index("offset"), "offset",
                                       pa.array(range(batch * n, batch * n + n), pa.int64()))
                measured = batch >= 2
                if measured and profiler is not None:
                    profiler.enable()
                before = starts[0]
                wall, cpu = time.perf_counter(), time.process_time()
                (out,) = list(task(iter(part.to_batches())))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if profiler is not None:
                    profiler.disable()
                commit = PartitionCommit.from_json(out.column(0)[0].as_py())
                bases[commit.partition_id] = commit.as_base()
                if measured:
                    started_threads += starts[0] - before
                    m = commit.metrics
                    figures.append((wall, cpu, m["open_s"], m["process_s"], m["commit_s"]))
        medians = [statistics.median(column) * 1000 for column in zip(*figures)]
        copy = next(Path(work, "local").glob("*/p=0"))
        ssts = sum(1 for db in copy.glob("db-*") for f in db.iterdir() if f.suffix == ".sst")
        print(f"{args.partitions} partitions x {args.batches} batches x {n} records, state and "
              f"output on S3{' (changelog mode)' if args.changelog else ''}; medians of the "
              f"{len(figures)} partition tasks after batch 1, ms:")
        for name, value in zip(("wall", "CPU", "state open", "records + output files",
                                "state candidate"), medians, strict=True):
            print(f"  {name:<24}{value:>8.1f}")
        print(f"  thread starts per task  {started_threads / max(len(figures), 1):>8.2f}")
        print(f"SST files in partition 0's local copy after {args.batches} batches: {ssts}")
        if profiler is not None:
            pstats.Stats(profiler).sort_stats(os.environ.get("PROFILE_SORT", "tottime")
                                              ).print_stats(int(os.environ.get("PROFILE_TOP",
                                                                               "30")))
    finally:
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
