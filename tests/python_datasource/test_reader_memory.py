"""A reused worker gives back what a large range's read freed (glibc keeps it otherwise).

librdkafka's fetch buffers and the Arrow batches built from them are freed by several threads
into glibc's arenas, which keep the pages: a worker that read 250k records held about 100 MiB
more afterwards, partition after partition. The reader trims the C heap after a range of at
least ``RELEASE_AFTER_RECORDS`` records. Measured in a fresh interpreter (this test process's
own heap would blur the figures), against the real broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

from orderedstream.core.workerheap import release_freed_memory

RECORDS = 200_000

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


def _read_in_fresh_process(bootstrap: str, topic: str, release: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _READ, bootstrap, topic, str(RECORDS), release],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MALLOC_ARENA_MAX": "2"})  # as the job's workers
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == RECORDS
    return result


def test_reading_a_large_range_gives_back_what_it_freed(kafka: Any, topic: Any) -> None:
    name = topic(partitions=1)
    producer = kafka.producer(linger_ms=50, compression_type="lz4")
    value = b'{"session": "s-0001", "kind": "update", "payload": "' + b"x" * 60 + b'"}'
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(name, key=b"k%d" % (i % 1000), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0

    kept = _read_in_fresh_process(kafka.bootstrap, name, "off")
    given_back = _read_in_fresh_process(kafka.bootstrap, name, "on")
    # The read itself needs its fetch buffers and batches (the peak); afterwards a worker
    # that trims is back near where it started, one that does not keeps much of the peak.
    assert given_back["peak"] - given_back["before"] > 30, given_back
    assert given_back["after"] - given_back["before"] < 40, given_back
    assert kept["after"] - given_back["after"] > 30, (kept, given_back)


def test_this_c_library_can_trim() -> None:
    assert release_freed_memory() is True  # Linux with glibc, as CI and the services run
