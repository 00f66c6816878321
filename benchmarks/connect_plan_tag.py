"""Decision 0021's measurement: do job tags of 10 kB to 16 MB reach a Spark Connect session's
tasks intact (``spark.job.tags``), and what does a collect with one cost? Prints one line per
size: size, the lengths the tasks saw, seconds. ``python benchmarks/connect_plan_tag.py``."""

from __future__ import annotations

import base64
import os
import tempfile
import time
from pathlib import Path

from orderedstream.dev.services.connect import ConnectServer


def _lengths(batches):  # type: ignore[no-untyped-def]
    import pyarrow as pa
    from pyspark import TaskContext

    context = TaskContext.get()
    for _ in batches:
        tags = context.getLocalProperty("spark.job.tags") or ""
        yield pa.RecordBatch.from_pydict({"n": [len(tags)]})


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="connect-tags-") as workdir:
        server = ConnectServer(Path(workdir)).start()
        spark = server.session()
        try:
            for size in (10_000, 100_000, 1_000_000, 4_000_000, 16_000_000):
                tag = "p-" + base64.b64encode(os.urandom(size * 3 // 4)).decode()
                spark.addTag(tag)
                began = time.perf_counter()
                try:
                    rows = spark.range(4).repartition(4).mapInArrow(_lengths, "n long").collect()
                finally:
                    spark.removeTag(tag)
                print(f"{size:>10} bytes: tasks saw {sorted(r.n for r in rows)} characters, "
                      f"{time.perf_counter() - began:.2f} s", flush=True)
        finally:
            spark.stop()
            server.stop()


if __name__ == "__main__":
    main()
