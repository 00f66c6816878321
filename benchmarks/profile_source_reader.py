"""Profile orderedkafka's executor read path alone (no Spark): where does a task's time go?

Usage: ``.venv/bin/python -m benchmarks.profile_source_reader --records 1000000``
Prints records/s of ``read_range`` over one partition and the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--option", action="append", default=[],
                        help="extra source option key=value (e.g. kafka.fetch.max.bytes=...)")
    args = parser.parse_args()
    extra = dict(o.split("=", 1) for o in args.option)

    from orderedstream.dev.services.kafka import KafkaBroker
    from orderedstream.python_datasource.options import parse_options
    from orderedstream.python_datasource.planning import OffsetRange
    from orderedstream.python_datasource.reader import read_range

    broker = KafkaBroker(Path(tempfile.mkdtemp()) / "kafka").start()
    try:
        broker.create_topic("profile", 1)
        producer = broker.producer(linger_ms=50, batch_num_messages=10000)
        value = b"x" * 100
        for i in range(args.records):
            while True:
                try:
                    producer.produce("profile", key=b"k%d" % (i % 10007), value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(300) == 0
        options = parse_options({"kafka.bootstrap.servers": broker.bootstrap,
                                 "subscribe": "profile", **extra}, streaming=False)
        rng = OffsetRange("profile", 0, 0, args.records, True)
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        rows = sum(b.num_rows for b in read_range(rng, options))
        profiler.disable()
        seconds = time.perf_counter() - started
        print(f"read_range: {rows} records in {seconds:.2f}s = {rows / seconds:,.0f} records/s "
              "(with cProfile on)")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    finally:
        broker.kill()


if __name__ == "__main__":
    main()
