"""The user function alone over a peer run's input: the floor the pack's overhead is measured
above (issue 16: "pack overhead <= 25 us per record above the user's function").

Run in its own process (``python -m benchmarks.cases._user_floor PARAMS_JSON``) after the
engines, on the same machine in the same hour, so the overhead subtracts what the user's
``SessionLogic`` costs now, not a figure taken on another day. Each Kafka partition is read
(confluent-kafka, from its first offset to its end), turned into the record dicts the ordered
stage hands the function (``RecordDecoder``, 10,000-row Arrow slices) and kept in memory, one
partition at a time (about 25,000 records). Then only the function is timed (process CPU):
``SessionLogic`` called per record in offset order, its rows drained, state in a dict (no
store, no output file). Prints one JSON line: records, output rows, CPU seconds.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pyarrow as pa

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
SLICE = 10_000
READ_TIMEOUT_S = 300.0


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
    """Every record of one partition as the stage's Arrow slices (offset order)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-user-floor",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, low)])
        rows: dict[str, list[Any]] = {name: [] for name in COLUMNS}
        slices: list[pa.RecordBatch] = []
        position = low
        deadline = time.monotonic() + READ_TIMEOUT_S
        while position < high:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}/{partition}: read up to offset {position} of "
                                   f"{high} in {READ_TIMEOUT_S:.0f} s")
            for msg in consumer.consume(5000, timeout=5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:  # the end (a marker at high-1)
                        position = high
                        continue
                    if error.fatal() or not error.retriable():
                        raise RuntimeError(f"{topic}/{partition}: {error}")
                    continue  # librdkafka retries a broker it lost
                offset = msg.offset()
                if offset is None:
                    raise RuntimeError(f"{topic}/{partition}: a record without an offset")
                rows["key"].append(msg.key())
                rows["value"].append(msg.value())
                rows["topic"].append(topic)
                rows["partition"].append(partition)
                rows["offset"].append(offset)
                rows["timestamp"].append(msg.timestamp()[1] * 1000)
                position = offset + 1
                if len(rows["key"]) == SLICE:
                    slices.append(_batch(rows))
                    rows = {name: [] for name in COLUMNS}
        if rows["key"]:
            slices.append(_batch(rows))
        return slices
    finally:
        consumer.close()


def _batch(rows: dict[str, list[Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "key": pa.array(rows["key"], pa.binary()), "value": pa.array(rows["value"], pa.binary()),
        "topic": pa.array(rows["topic"], pa.string()),
        "partition": pa.array(rows["partition"], pa.int32()),
        "offset": pa.array(rows["offset"], pa.int64()),
        "timestamp": pa.array(rows["timestamp"], pa.timestamp("us", tz="UTC"))})


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
