"""Reader heap: what a reused worker keeps after reading one large Kafka range.

librdkafka's fetch buffers and the Arrow batches built from them are freed by several threads
into glibc's arenas, which keep the pages. The reader trims the C heap after a range of at
least ``RELEASE_AFTER_RECORDS`` records (``orderedstream.core.workerheap``, process tuning on).
Each side reads the same one-partition topic with the native reader in a fresh interpreter
(this process's own heap would blur the figures), ``MALLOC_ARENA_MAX=2`` as the job's workers:
ours trims, the baseline is the same read with the trim threshold out of reach. Reported: the
resident memory kept after the read (after minus before, MiB), with each side's peak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

from benchmarks.common import CaseContext, Result

_READ = textwrap.dedent("""
    import json, sys
    from orderedstream.python_datasource.options import parse_options
    from orderedstream.python_datasource.planning import OffsetRange
    from orderedstream.python_datasource.consumer_pool import POOL
    from orderedstream.python_datasource import reader
    from orderedstream.core.workerheap import release_freed_memory

    def rss_mib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024

    bootstrap, topic, end, release = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if release == "off":
        reader.RELEASE_AFTER_RECORDS = end + 1
    options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                             "reader": "native"}, streaming=False)
    list(reader.read_range(OffsetRange(topic, 0, 0, 1), options))  # imports, first client
    POOL.clear()  # that consumer prefetched the records after its range: close it
    release_freed_memory()
    before = rss_mib()
    rows = peak = 0
    for batch in reader.read_range(OffsetRange(topic, 0, 0, end), options):
        rows += batch.num_rows
        peak = max(peak, rss_mib())
    del batch
    print(json.dumps({"rows": rows, "before": before, "peak": peak, "after": rss_mib()}))
    POOL.clear()
""")


def _produce(ctx: CaseContext, topic: str, records: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": ctx.bootstrap, "linger.ms": 50,
                         "compression.type": "lz4"})
    value = b'{"session": "s-0001", "kind": "update", "payload": "' + b"x" * 60 + b'"}'
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % (i % 1000), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("benchmark data was not fully delivered")


def _read(ctx: CaseContext, topic: str, records: int, release: str) -> dict[str, Any]:
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "ORDEREDSTREAM_PROCESS_TUNING": "1"}
    done = subprocess.run([sys.executable, "-c", _READ, ctx.bootstrap, topic, str(records),
                           release], capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the {release} read failed: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["rows"] != records:
        raise RuntimeError(f"the {release} read returned {result['rows']} of {records} rows")
    return result


def run(ctx: CaseContext) -> list[Result]:
    from orderedstream.core.workerheap import RELEASE_AFTER_RECORDS

    records = max(2 * RELEASE_AFTER_RECORDS, min(ctx.scale["records"], 200_000))
    topic = f"bench-readerheap-{int(time.time())}"
    _produce(ctx, topic, records)
    kept = _read(ctx, topic, records, "off")
    trimmed = _read(ctx, topic, records, "on")
    return [Result(
        case="readerheap", metric="memory kept after a large range", unit="MiB",
        ours=round(max(trimmed["after"] - trimmed["before"], 0.1), 1),
        baseline=round(max(kept["after"] - kept["before"], 0.1), 1),
        baseline_name="the same read without the trim", higher_is_better=False,
        how=f"VmRSS after minus before one {records:,}-record range, native reader, fresh "
            "interpreter, MALLOC_ARENA_MAX=2",
        extra={"records": records, "trimmed": trimmed, "untrimmed": kept})]
