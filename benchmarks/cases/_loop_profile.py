"""The pack's per-record loop alone: ``PartitionRun.outputs`` (decode, state lookup, the user
function, output rows to Arrow, the state flush into a real local RocksDB partition) against
``SessionLogic`` alone over the same decoded records (``benchmarks.cases._user_floor``'s dict
state). No Kafka, no Spark: what is left is the pack's own Python cost on the worker path.

``python -m benchmarks.cases._loop_profile [RECORDS] [time|prof]``: ``time`` prints one JSON
line (microseconds per record of each side and their difference), ``prof`` prints cProfile's
top functions by own time. Input: the generator's messages, made in process (seeded).
Not a case itself (the leading underscore keeps it out of ``benchmarks.run``'s list).
"""

from __future__ import annotations

import cProfile
import json
import pstats
import random
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
SLICE = 10_000


def _pieces(records: int) -> list[pa.RecordBatch]:
    """``records`` generator messages of 400 open sessions as the stage's Arrow slices."""
    from orderedstream.app.job.generator import GeneratorOptions, _Session

    rng = random.Random(1)
    opts = GeneratorOptions()
    sessions = [_Session("site0", i, opts, rng) for i in range(400)]
    keys: list[bytes] = []
    values: list[bytes] = []
    while len(keys) < records:
        session = rng.choice(sessions)
        message = session.next_message(rng)
        if message is None:
            sessions.remove(session)
            sessions.append(_Session("site0", 10**6 + len(keys), opts, rng))
            continue
        keys.append(session.id.encode())
        values.append(json.dumps(message).encode())
    now = int(time.time() * 1000)
    pieces = []
    for a in range(0, records, SLICE):
        b = min(records, a + SLICE)
        pieces.append(pa.record_batch({
            "key": pa.array(keys[a:b], pa.binary()), "value": pa.array(values[a:b], pa.binary()),
            "topic": pa.array(["t"] * (b - a)), "partition": pa.array([0] * (b - a), pa.int32()),
            "offset": pa.array(range(a, b), pa.int64()),
            "timestamp": pa.array([now] * (b - a), pa.timestamp("ms"))}))
    return pieces


def _pack_run(work: str) -> Any:
    """A ``PartitionRun`` of the main job's stage options on an empty local partition."""
    from orderedstream.app.job.sessions import OUTPUT_SCHEMA, SessionLogic
    from orderedstream.statestore.ordered import ProcessingTimeTimeout
    from orderedstream.statestore.ordered.keyed_state import KeyedStateTable
    from orderedstream.statestore.ordered.options import OrderedOptions
    from orderedstream.statestore.ordered.plan import BatchPlan, PartitionBase
    from orderedstream.statestore.ordered.runner import PartitionRun
    from orderedstream.statestore.ordered.state_access import open_partition

    options = OrderedOptions(
        state_location=f"{work}/state", output=f"{work}/out", output_schema=OUTPUT_SCHEMA,
        key="key", timeout=ProcessingTimeTimeout(), columns=COLUMNS,
        store_options={"local_dir": f"{work}/local"}, placement="off")
    base = PartitionBase()
    _store, part = open_partition(options, "t", 0, base, writer="loop-profile")
    plan = BatchPlan(batch_id=0, processing_time_ms=int(time.time() * 1000),
                     bases={"t-0": base})
    return PartitionRun(options, SessionLogic(), plan, "t-0", base,
                        KeyedStateTable(part, options.max_cached_keys))


def _drain(run: Any, pieces: list[pa.RecordBatch]) -> int:
    return sum(batch.num_rows for batch in run.outputs(pieces))


def _user_alone(pieces: list[pa.RecordBatch]) -> float:
    """CPU seconds of ``SessionLogic`` alone over the decoded records."""
    from benchmarks.cases._user_floor import DictState
    from orderedstream.app.job.sessions import SessionLogic
    from orderedstream.statestore.ordered.records import RecordDecoder

    decoder = RecordDecoder(COLUMNS, "key")
    decoded = [(k, r) for p in pieces for k, _e, r in zip(*decoder.decode(p))]
    state, logic = DictState(), SessionLogic()
    start = time.process_time()
    for key, record in decoded:
        state.key = key
        for _row in logic(key, record, state):
            pass
    return time.process_time() - start


def main(records: int, mode: str) -> None:
    pieces = _pieces(records)
    with tempfile.TemporaryDirectory() as work:
        run = _pack_run(work)
        if mode == "prof":
            profile = cProfile.Profile()
            profile.runcall(_drain, run, pieces)
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            return
        user = _user_alone(pieces)  # first, so the pack's side is not the one warming up
        start = time.process_time()
        rows = _drain(run, pieces)
        pack = time.process_time() - start
    print(json.dumps({"records": records, "output_rows": rows,
                      "pack_loop_us": round(pack / records * 1e6, 2),
                      "user_us": round(user / records * 1e6, 2),
                      "marginal_us": round((pack - user) / records * 1e6, 2)}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000,
         sys.argv[2] if len(sys.argv) > 2 else "time")
