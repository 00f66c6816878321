"""Sink throughput and commit latency, standalone: starts its own SeaweedFS S3 and runs the
``sink`` case (see ``benchmarks/cases/sink.py``) once.

Usage::

    .venv/bin/python benchmarks/sink_bench.py --rows 2000000

Expected output (one line per figure; ratio = ours / Spark's, > 1 means faster)::

    fencedparquet write throughput     410,000 rows/s  vs 380,000  ratio 1.08
    ...
    commit latency per batch (p50)     45 ms
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()

    from benchmarks.cases.sink import run
    from benchmarks.common import CaseContext
    from orderedstream.dev.services.s3 import S3Server

    work = Path(tempfile.mkdtemp(prefix="sink-bench-"))
    s3 = S3Server(work / "s3").start()
    try:
        ctx = CaseContext("", s3.endpoint, s3.storage_options, s3.bucket, str(work), "custom",
                          {"rows": args.rows})
        for r in run(ctx):
            base = "" if r.baseline is None else f"  vs {r.baseline:,.2f}  ratio {r.ratio:.2f}"
            print(f"{r.metric:<40} {r.ours:>12,.1f} {r.unit}{base}  {r.extra or ''}")
    finally:
        s3.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
