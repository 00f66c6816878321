"""The ordered stage's per-record budget without Spark or Kafka: where does a task's time go?

Usage: ``.venv/bin/python -m benchmarks.profile_ordered_task --records 200000 [--rounds 5]
[--profile]``

Builds the main job's input (capture-session records from the job's generator, one Kafka
partition, as the Arrow batches a task gets) in memory, freezes the heap as a reused Spark
worker does, then runs ``OrderedTask`` end to end (state in a local RocksDB store on
``file://``, output Parquet files written, state candidate prepared) and shows, per record, in
microseconds of CPU (median of ``--rounds`` runs):

- ``task (whole, untimed)``: process CPU (every thread) of the task as the workers run it;
- the same task with its parts timed in place (``perf_counter_ns`` around each call): the user
  function (``SessionLogic``, its generator drained), state loads and flushes (get/put),
  rows -> Arrow batches (``_to_batch``), and the CPU of the other threads (the Parquet
  encoder, RocksDB's own threads);
- ``decode``: Arrow slices -> keys, encoded keys and record dicts (``RecordDecoder``), alone;
- ``loop rest``: the main thread's time not in the parts above (offset checks, the per-record
  loop, result checks, state open and commit);
- ``pack overhead (task - user)``: the whole task minus the user function timed in it;
- ``user function alone``: ``SessionLogic`` over the same records with state in a dict (the
  floor issue 16 compares against).

Reading Kafka is measured by ``benchmarks.profile_source_reader``. The floor and decode runs
come after the task runs, so the big lists they keep do not slow the task's collections.
``--profile`` prints the top functions of one more task run (cProfile; ``PROFILE_SORT``,
``PROFILE_TOP``).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import os
import pstats
import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from benchmarks.cases._user_floor import DictState
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


def cpu_us(fn: Callable[[], Any], records: int) -> tuple[float, Any]:
    start = time.process_time()
    result = fn()
    return (time.process_time() - start) * 1e6 / records, result


class _InSitu:
    """Main-thread nanoseconds of the task's parts, timed where the task runs them: the user
    function (its generator drained: the user's work), state loads/flushes and rows -> Arrow.
    Two ``perf_counter_ns`` calls per timed call (~0.1 us) land in the part they wrap."""

    def __init__(self, logic: Callable[..., Any]) -> None:
        self.logic = logic
        self.ns = {"user": 0, "state": 0, "to_batch": 0}

    def func(self, key: Any, record: Any, state: Any) -> list[Any] | None:
        clock = time.perf_counter_ns
        start = clock()
        out = self.logic(key, record, state)
        rows = None if out is None else list(out)
        self.ns["user"] += clock() - start
        return rows

    def wrap(self, owner: Any, name: str, part: str) -> Callable[[], None]:
        """Time ``owner.name`` into ``part``; returns the undo."""
        original = owner.__dict__[name]
        inner = original.__func__ if isinstance(original, staticmethod) else original
        ns = self.ns
        clock = time.perf_counter_ns

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                ns[part] += clock() - start

        setattr(owner, name, staticmethod(timed) if isinstance(original, staticmethod)
                else timed)
        return lambda: setattr(owner, name, original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="task runs (the median is shown; the first warms caches)")
    parser.add_argument("--output-format", choices=["delta", "parquet"], default="delta",
                        help="the job's output_format (default: delta, the main job's)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    from orderedstream.app.job.sessions import OUTPUT_SCHEMA, PARTITION_BY, SessionLogic
    from orderedstream.statestore.ordered import OrderedStateful, ProcessingTimeTimeout
    from orderedstream.statestore.ordered.keyed_state import KeyedStateTable
    from orderedstream.statestore.ordered.plan import BatchPlan, PartitionCommit
    from orderedstream.statestore.ordered.records import RecordDecoder
    from orderedstream.statestore.ordered.runner import OrderedTask, PartitionRun

    batches = build_input(args.records)
    n = args.records
    logic = SessionLogic(100, "10 minutes")
    # The input's Python objects are gone; freeze what is left (modules) as a reused Spark
    # worker does (orderedstream.core.workerheap), so collections walk only the task's objects.
    gc.collect()
    gc.freeze()

    def run_task(func: Any, profiler: cProfile.Profile | None = None,
                 ) -> tuple[dict[str, float], PartitionCommit]:
        """One task over the whole input on a fresh local state and output directory."""
        with tempfile.TemporaryDirectory() as tmp:
            proc = OrderedStateful(func, state_location=f"file://{tmp}/state",
                                   output=f"file://{tmp}/out", output_schema=OUTPUT_SCHEMA,
                                   key="key", timeout=ProcessingTimeTimeout(), columns=COLUMNS,
                                   store_options={"local_dir": f"{tmp}/local"},
                                   writer_options={"partitionBy": list(PARTITION_BY)},
                                   output_format=args.output_format)
            task = OrderedTask(proc.options, proc.func, BatchPlan(0, int(time.time() * 1000)),
                               proc.sink)
            cpu, main_thread = time.process_time(), time.thread_time()
            if profiler is not None:
                profiler.enable()
            try:
                (out,) = list(task(iter(batches)))
            finally:
                if profiler is not None:
                    profiler.disable()
            cpu, main_thread = time.process_time() - cpu, time.thread_time() - main_thread
        commit = PartitionCommit.from_json(out.column(0)[0].as_py())
        return {"cpu": cpu * 1e6 / n, "main": main_thread * 1e6 / n}, commit

    # 1. The task as the workers run it (process CPU: every thread, i.e. also the Parquet
    #    encoder and RocksDB's own threads).
    wholes = sorted((run_task(logic) for _ in range(args.rounds)), key=lambda r: r[0]["cpu"])
    whole, commit = wholes[len(wholes) // 2]
    # 2. The same task with its parts timed in place (median round by the user's time).
    splits = []
    for _ in range(args.rounds):
        insitu = _InSitu(logic)
        undo = [insitu.wrap(KeyedStateTable, "load", "state"),
                insitu.wrap(KeyedStateTable, "flush", "state"),
                insitu.wrap(PartitionRun, "_to_batch", "to_batch")]
        try:
            times, _ = run_task(insitu.func)
        finally:
            for restore in undo:
                restore()
        splits.append((times, {k: v / 1e3 / n for k, v in insitu.ns.items()}))
    times, parts = sorted(splits, key=lambda s: s[1]["user"])[len(splits) // 2]
    # 3. Decoding alone (column conversion + the record dicts the loop iterates).
    decoder = RecordDecoder(COLUMNS, "key")

    def decode() -> int:
        count = 0
        for batch in batches:
            keys, encoded, records = decoder.decode(batch)
            for _ in zip(keys, encoded, records):
                count += 1
        return count

    decode_us, _ = cpu_us(decode, n)
    # 4. The floor: the user function alone over the same records, state in a dict.
    decoded = [(k, r) for b in batches for k, _e, r in zip(*decoder.decode(b))]

    def user() -> list[Any]:
        state = DictState()
        rows: list[Any] = []
        for key, record in decoded:
            state.key = key
            rows.extend(logic(key, record, state))
        return rows

    floor_us, _ = cpu_us(user, n)
    decoded.clear()
    background = times["cpu"] - times["main"]
    rest = times["main"] - parts["user"] - parts["state"] - parts["to_batch"] - decode_us
    print(f"records {n:,}, output rows {commit.output_rows:,}, keys {commit.num_keys:,}; "
          f"median of {args.rounds} rounds; CPU us per record")
    table = (("decode (Arrow -> keys, record dicts)", decode_us),
             ("user function (in the task)", parts["user"]),
             ("state (loads, flushes: get/put)", parts["state"]),
             ("output rows -> Arrow batches", parts["to_batch"]),
             ("Parquet encode + RocksDB threads", background),
             ("loop rest (checks, calls, open/commit)", rest),
             ("task (whole, timed parts)", times["cpu"]),
             ("task (whole, untimed)", whole["cpu"]),
             ("pack overhead (task - user)", whole["cpu"] - parts["user"]),
             ("user function alone (dict state)", floor_us))
    for name, value in table:
        print(f"{name:<42}{value:>8.2f}")
    if args.profile:
        profiler = cProfile.Profile()
        run_task(logic, profiler)
        pstats.Stats(profiler).sort_stats(os.environ.get("PROFILE_SORT", "tottime")).print_stats(
            int(os.environ.get("PROFILE_TOP", "25")))


if __name__ == "__main__":
    main()
