"""Profile orderedkafka's executor read path alone (no Spark): where does a task's time go?

Usage: ``.venv/bin/python -m benchmarks.profile_source_reader --records 1000000``
Prints, for each reader (``native``: orderedstream._kafka_native; ``python``: confluent-kafka),
records/s and CPU ns per record of ``read_range`` over one partition, then the cost of small
batches: consecutive ranges of ``--batch-records`` records read one after another (as a stream's
tasks do in one reused Python worker) with the consumer pool off (``kafkaConsumer.cacheCapacity``
= 0: a new consumer per range) and on, and every other range (as when two workers take a
partition in turns). ``--profile`` adds the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _read(rng: Any, options: Any) -> int:
    from orderedstream.python_datasource.reader import read_range

    return sum(b.num_rows for b in read_range(rng, options))


def _throughput(broker: Any, records: int, reader: str, extra: dict[str, str],
                profile: bool) -> None:
    from orderedstream.python_datasource.options import parse_options
    from orderedstream.python_datasource.planning import OffsetRange

    options = parse_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": "profile",
                             "reader": reader, "kafkaConsumer.cacheCapacity": "0", **extra},
                            streaming=False)
    rng = OffsetRange("profile", 0, 0, records, True)
    _read(OffsetRange("profile", 0, 0, min(records, 10_000), True), options)  # warm-up
    runs = []
    for _ in range(3):
        wall, cpu = time.perf_counter(), time.process_time()
        rows = _read(rng, options)
        runs.append((rows, time.perf_counter() - wall, time.process_time() - cpu))
    rows, wall, cpu = sorted(runs, key=lambda r: r[1])[1]
    print(f"{reader:>6}: {rows:,} records in {wall:.2f}s = {rows / wall:,.0f} records/s, "
          f"{cpu / rows * 1e9:,.0f} ns CPU per record (median of 3)")
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        _read(rng, options)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def _small_batches(broker: Any, reader: str, batch: int, count: int) -> None:
    from orderedstream.python_datasource.consumer_pool import POOL
    from orderedstream.python_datasource.options import parse_options
    from orderedstream.python_datasource.planning import OffsetRange

    for capacity in ("0", "16"):
        options = parse_options({"kafka.bootstrap.servers": broker.bootstrap,
                                 "subscribe": "profile", "reader": reader,
                                 "kafkaConsumer.cacheCapacity": capacity}, streaming=False)
        POOL.clear()
        before = (POOL.stats.created, POOL.stats.reused, POOL.stats.replaced)
        times = []
        for i in range(count):
            started = time.perf_counter()
            assert _read(OffsetRange("profile", 0, i * batch, (i + 1) * batch, True),
                         options) == batch
            times.append((time.perf_counter() - started) * 1000)
        created, reused, replaced = (a - b for a, b in zip(
            (POOL.stats.created, POOL.stats.reused, POOL.stats.replaced), before))
        print(f"{reader:>6}, pool {'on ' if capacity != '0' else 'off'}: {count} ranges of "
              f"{batch} records: median {statistics.median(times):.2f} ms, p90 "
              f"{sorted(times)[int(0.9 * (len(times) - 1))]:.2f} ms per range "
              f"(consumers created {created}, reused {reused}, replaced {replaced})")
    # Two workers taking a partition in turns: each range starts where the other worker's
    # stopped, so this worker's pooled consumer stopped elsewhere ("moved": assigned there),
    # idle for a moment between batches.
    options = parse_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": "profile",
                             "reader": reader}, streaming=False)
    POOL.clear()
    moved_before, replaced_before = POOL.stats.moved, POOL.stats.replaced  # since start
    times = []
    for i in range(count // 2):
        started = time.perf_counter()
        assert _read(OffsetRange("profile", 0, 2 * i * batch, (2 * i + 1) * batch, True),
                     options) == batch
        times.append((time.perf_counter() - started) * 1000)
        time.sleep(0.1)
    print(f"{reader:>6}, pool on, every other range (another worker read the one between): "
          f"median {statistics.median(times[1:]):.2f} ms per range (idle consumer assigned "
          f"there {POOL.stats.moved - moved_before} times, replaced "
          f"{POOL.stats.replaced - replaced_before})")
    POOL.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--reader", action="append", choices=["native", "python"],
                        help="reader(s) to measure (default: both)")
    parser.add_argument("--batch-records", type=int, default=100)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    parser.add_argument("--option", action="append", default=[],
                        help="extra source option key=value (e.g. kafka.fetch.max.bytes=...)")
    args = parser.parse_args()
    extra = dict(o.split("=", 1) for o in args.option)
    readers = args.reader or ["native", "python"]

    from orderedstream.dev.services.kafka import KafkaBroker

    work = Path(tempfile.mkdtemp(prefix="profile-source-"))
    broker = KafkaBroker(work / "kafka").start()
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
        for reader in readers:
            _throughput(broker, args.records, reader, extra, args.profile)
        for reader in readers:
            _small_batches(broker, reader, args.batch_records,
                           min(args.batches, args.records // args.batch_records))
    finally:
        broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
