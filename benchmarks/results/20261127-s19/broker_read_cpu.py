"""The Kafka broker's CPU per record served to the native reader, by consumer option
(session 19). Usage: ``.venv/bin/python benchmarks/results/20261127-s19/broker_read_cpu.py``:
starts its own broker, produces 200,000 records of about 200 B in 4 topics x 2 partitions, then
reads them all with ``read_range`` per partition, twice per variant, and prints the broker's
CPU above its idle rate.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import psutil

from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.python_datasource.options import parse_options
from orderedstream.python_datasource.planning import OffsetRange
from orderedstream.python_datasource.reader import read_range

RECORDS = 200_000
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "fetch1MB": {"kafka.max.partition.fetch.bytes": str(1 << 20)},
    "wait50": {"kafka.fetch.wait.max.ms": "50"},
    "wait500": {"kafka.fetch.wait.max.ms": "500"},
    "fetch32MB": {"kafka.max.partition.fetch.bytes": str(32 << 20)},
}


def main() -> None:
    broker = KafkaBroker(Path(tempfile.mkdtemp()) / "kafka").start()
    try:
        pid = broker._proc.pid if broker._proc else None
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]

        def broker_cpu() -> float:
            return sum(p.cpu_times().user + p.cpu_times().system for p in procs)

        for topic in range(4):
            broker.create_topic(f"t{topic}", 2)
        producer = broker.producer(linger_ms=50, batch_num_messages=10000)
        value = json.dumps({"type": "update", "session": "s" * 20,
                            "values": {"a": "x" * 120}}).encode()
        for i in range(RECORDS):
            while True:
                try:
                    producer.produce(f"t{i % 4}", partition=(i // 4) % 2,
                                     key=b"k%d" % (i % 997), value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(300) == 0
        time.sleep(3)
        before = broker_cpu()
        time.sleep(3)
        idle = (broker_cpu() - before) / 3
        print(f"broker idle {idle:.3f} cores; value {len(value)} B")
        for _ in range(2):
            for name, extra in VARIANTS.items():
                options = parse_options({"kafka.bootstrap.servers": broker.bootstrap,
                                         "subscribe": "t0", "reader": "native",
                                         "kafkaConsumer.cacheCapacity": "0", **extra},
                                        streaming=False)
                cpu0, began, count = broker_cpu(), time.perf_counter(), 0
                for topic in range(4):
                    for partition in range(2):
                        rng = OffsetRange(f"t{topic}", partition, 0, RECORDS // 8, True)
                        count += sum(b.num_rows for b in read_range(rng, options))
                wall = time.perf_counter() - began
                used = broker_cpu() - cpu0 - idle * wall
                print(f"{name:10s} {count} records in {wall:.2f} s; broker CPU above idle "
                      f"{used:.2f} s ({used / count * 1e6:.2f} us/record)")
    finally:
        broker.kill()


if __name__ == "__main__":
    main()
