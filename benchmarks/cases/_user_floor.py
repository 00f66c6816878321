"""The user function alone over a peer run's input: the floor the pack's overhead is measured
above (the project's target: "pack overhead <= 25 us per record above the user's function").

Run in its own process (``python -m benchmarks.cases._user_floor PARAMS_JSON``) after the
engines, on the same machine in the same hour, so the overhead subtracts what the user's
``SessionLogic`` costs now, not a figure taken on another day. Each Kafka partition is read
by the pack's range reader from its first offset to its end, turned into the record dicts the
ordered stage hands the function (``RecordDecoder``, 10,000-row Arrow slices) and kept in
memory, one partition at a time (about 25,000 records). Then only the function is timed
(process CPU): ``SessionLogic`` called per record in offset order, its rows drained, state in
a dict (no store, no output file). Prints one JSON line: records, output rows, CPU seconds.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pyarrow as pa

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
SLICE = 10_000


class DictState:
    """``GroupState``'s calls as ``SessionLogic`` makes them, on a plain dict."""

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


def _slices(bootstrap: str, topic: str, partition: int) -> list[pa.RecordBatch]:
    """Every record of one partition as the stage's Arrow slices (offset order), read by the
    pack's own range reader (``read_range``: the records and columns a task of the job gets)."""
    from confluent_kafka import Consumer, TopicPartition

    from orderedstream.python_datasource.options import parse_options
    from orderedstream.python_datasource.planning import OffsetRange
    from orderedstream.python_datasource.reader import read_range

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-user-floor"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()
    options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                             "arrowBatchMaxRecords": str(SLICE)}, streaming=False)
    return list(read_range(OffsetRange(topic, partition, low, high), options))


def measure(bootstrap: str, partitions: list[tuple[str, int]], snapshot_every: int,
            idle_timeout: str) -> dict[str, Any]:
    """CPU seconds of ``SessionLogic`` alone over every record of ``partitions``."""
    from orderedstream.app.job.sessions import SessionLogic
    from orderedstream.statestore.ordered.records import RecordDecoder

    logic = SessionLogic(snapshot_every, idle_timeout)
    decoder = RecordDecoder(COLUMNS, "key")
    records = output = 0
    cpu = 0.0
    for topic, partition in partitions:
        decoded = [(k, r) for piece in _slices(bootstrap, topic, partition)
                   for k, _e, r in zip(*decoder.decode(piece))]
        state = DictState()
        produced = 0
        start = time.process_time()
        for key, record in decoded:
            state.key = key
            for _row in logic(key, record, state):
                produced += 1
        cpu += time.process_time() - start
        records += len(decoded)
        output += produced
    return {"records": records, "output_rows": output, "cpu_s": cpu}


def main(path: str) -> None:
    spec = json.loads(open(path).read())
    result = measure(spec["bootstrap"], [tuple(p) for p in spec["partitions"]],
                     spec["snapshot_every"], spec["idle_timeout"])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
