"""RSS of one process reading four 250k-record Kafka partitions with the pack's range reader
(native, consumers pooled), one after the other (session 29). Starts its own broker.

Usage: ``MALLOC_ARENA_MAX=2 python memread.py 250000`` prints, per partition, the peak RSS
while reading, the RSS after it and the thread count, then the RSS after the consumer pool is
closed. ``KOPTS=kafka.queued.min.messages=20000,...`` adds reader options. The reader gives
freed memory back after a range of ``RELEASE_AFTER_RECORDS`` records or more; set
``NO_RELEASE=1`` to see what a worker kept without it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.python_datasource import reader
from orderedstream.python_datasource.consumer_pool import POOL
from orderedstream.python_datasource.options import parse_options
from orderedstream.python_datasource.planning import OffsetRange


def rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) >> 10 for line in status if line.startswith("VmRSS"))


def main(n: int) -> None:
    if os.environ.get("NO_RELEASE"):
        reader.RELEASE_AFTER_RECORDS = n + 1
    extra = dict(kv.split("=", 1) for kv in os.environ.get("KOPTS", "").split(",") if kv)
    with tempfile.TemporaryDirectory() as tmp:
        broker = KafkaBroker(Path(tmp) / "k").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("t", 4, 1)])["t"].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                                 "compression.type": "lz4"})
            value = b'{"session":"s","kind":"update","payload":"' + b"x" * 60 + b'"}'
            for part in range(4):
                for i in range(n):
                    while True:
                        try:
                            producer.produce("t", key=b"k%d" % (i % 1000), value=value,
                                             partition=part)
                            break
                        except BufferError:
                            producer.poll(0.05)
            producer.flush(120)
            options = parse_options({"kafka.bootstrap.servers": broker.bootstrap,
                                     "subscribe": "t", "reader": "native", **extra},
                                    streaming=False)
            print("before", rss())
            for part in range(4):
                peak = rows = 0
                for batch in reader.read_range(OffsetRange("t", part, 0, n), options):
                    rows += batch.num_rows
                    peak = max(peak, rss())
                time.sleep(0.5)
                print("partition", part, "rows", rows, "peak during", peak, "after", rss(),
                      "threads", len(os.listdir("/proc/self/task")))
            POOL.clear()
            time.sleep(0.5)
            print("after pool clear", rss())
        finally:
            broker.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]))
