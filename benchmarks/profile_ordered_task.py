"""The ordered stage's per-record budget without Spark or Kafka: where does a task's time go?

Usage: ``.venv/bin/python -m benchmarks.profile_ordered_task --records 200000 [--profile]``

Builds the main job's input (capture-session records from the job's generator, one Kafka
partition, as the Arrow batches a task gets) in memory, then times, per record, in microseconds
of CPU (``time.process_time``), each part alone and the whole task:

- ``decode``: Arrow slices -> keys, encoded keys and record dicts (``RecordDecoder``);
- ``user function``: ``SessionLogic`` over those dicts with state in a plain dict (the floor);
- ``state``: the state table's loads, cached gets and flushes for the same keys and values;
- ``output``: the function's rows -> Arrow batches of the output schema (``_to_batch``);
- ``task``: ``OrderedTask`` end to end (state in a local RocksDB store on ``file://``, output
  Parquet files written, state candidate prepared), and ``task - user function``: the pack's
  overhead per record. Reading Kafka is measured by ``benchmarks.profile_source_reader``.

``--profile`` prints the top functions of the task by own time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import pstats
import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from orderedstream.app.job.generator import GeneratorOptions, _Session
from orderedstream.app.job.messages import encode

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
BATCH_ROWS = 10_000


def build_input(records: int, seed: int = 11) -> list[pa.RecordBatch]:
    """``records`` capture-session records of one partition, ``BATCH_ROWS`` per batch."""
    rng = random.Random(seed)
    opts = GeneratorOptions(sessions_per_site=10**9, open_sessions=8)
    sessions: list[_Session] = []
    index = 0
    keys: list[bytes] = []
    values: list[bytes] = []
    while len(keys) < records:
        while len(sessions) < opts.open_sessions:
            sessions.append(_Session("site00", index, opts, rng))
            index += 1
        session = rng.choice(sessions)
        message = session.next_message(rng)
        if message is None:
            sessions.remove(session)
            continue
        keys.append(session.id.encode())
        values.append(encode(message))
    now = datetime.datetime.now(datetime.UTC)
    batches = []
    for start in range(0, records, BATCH_ROWS):
        n = min(BATCH_ROWS, records - start)
        batches.append(pa.RecordBatch.from_pydict({
            "key": keys[start:start + n], "value": values[start:start + n],
            "topic": ["sessions-site00"] * n, "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(start, start + n), pa.int64()),
            "timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC"))}))
    return batches


class DictState:
    """``GroupState``'s calls as ``SessionLogic`` makes them, on a plain dict (the floor)."""

    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}
        self.key: Any = None

    @property
    def exists(self) -> bool:
        return self.key in self.values

    def get(self) -> Any:
        return self.values[self.key]

    def update(self, value: Any) -> None:
        self.values[self.key] = value

    def remove(self) -> None:
        self.values.pop(self.key, None)

    def set_timeout_duration(self, duration: Any) -> None:
        pass


def cpu_us(fn: Callable[[], Any], records: int) -> tuple[float, Any]:
    start = time.process_time()
    result = fn()
    return (time.process_time() - start) * 1e6 / records, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    from orderedstream.app.job.sessions import OUTPUT_SCHEMA, SessionLogic
    from orderedstream.statestore.ordered import OrderedStateful, ProcessingTimeTimeout
    from orderedstream.statestore.ordered.plan import BatchPlan, PartitionCommit
    from orderedstream.statestore.ordered.records import RecordDecoder
    from orderedstream.statestore.ordered.runner import OrderedTask, PartitionRun

    batches = build_input(args.records)
    n = args.records
    logic = SessionLogic(100, "10 minutes")
    decoder = RecordDecoder(COLUMNS, "key")

    def decode() -> list[tuple[Any, Any, Any]]:
        out = []
        for batch in batches:
            keys, encoded, records = decoder.decode(batch)
            out.extend(zip(keys, encoded, records))
        return out

    decode_us, decoded = cpu_us(decode, n)

    def user() -> list[Any]:
        state = DictState()
        rows: list[Any] = []
        for key, _encoded, record in decoded:
            state.key = key
            rows.extend(logic(key, record, state))
        return rows

    user_us, rows = cpu_us(user, n)

    def output() -> int:
        limit = 8192
        return sum(PartitionRun._to_batch(rows[i:i + limit], OUTPUT_SCHEMA).num_rows
                   for i in range(0, len(rows), limit))

    output_us, _ = cpu_us(output, n)

    with tempfile.TemporaryDirectory() as tmp:
        proc = OrderedStateful(logic, state_location=f"file://{tmp}/state",
                               output=f"file://{tmp}/out", output_schema=OUTPUT_SCHEMA,
                               key="key", timeout=ProcessingTimeTimeout(), columns=COLUMNS,
                               store_options={"local_dir": f"{tmp}/local"})
        plan = BatchPlan(0, int(time.time() * 1000))
        task = OrderedTask(proc.options, proc.func, plan, proc.sink)
        profiler = cProfile.Profile() if args.profile else None

        def run_task() -> PartitionCommit:
            if profiler is not None:
                profiler.enable()
            try:
                (out,) = list(task(iter(batches)))
            finally:
                if profiler is not None:
                    profiler.disable()
            return PartitionCommit.from_json(out.column(0)[0].as_py())

        task_us, commit = cpu_us(run_task, n)
    state_us = task_us - decode_us - user_us - output_us
    print(f"records {n:,}, output rows {commit.output_rows:,} ({len(rows):,} in the floor run), "
          f"keys {commit.num_keys:,}")
    print(f"{'part':<28}{'us/record':>10}")
    for name, value in (("decode", decode_us), ("user function (dict state)", user_us),
                        ("output (rows -> Arrow)", output_us),
                        ("state + checks + files (rest)", state_us), ("task (whole)", task_us),
                        ("pack overhead (task - user)", task_us - user_us)):
        print(f"{name:<28}{value:>10.2f}")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
