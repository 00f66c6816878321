"""One small S3 put through s3fs vs through obstore (``orderedstream.core.objectstore``).

Usage: ``.venv/bin/python -m benchmarks.s3_put_bench [--puts 300] [--bytes 3000]``

Starts the local SeaweedFS S3 server, then times ``--puts`` puts of ``--bytes`` random bytes
each way, in this process: wall time and this process's CPU (user + system) per put. The
server's own CPU is the same for both and not counted. Shapes measured: a conditional create
(``If-None-Match: *``, what a manifest or a commit record is), a put of a local file (a state
SST), and ``objectstore.put`` of both.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _time(name: str, put: Callable[[int], object], n: int) -> None:
    put(-1)  # the first put creates the client: not counted
    wall, cpu = time.perf_counter(), _cpu()
    for i in range(n):
        put(i)
    print(f"{name:42s} wall {(time.perf_counter() - wall) / n * 1000:6.2f} ms"
          f"   CPU {(_cpu() - cpu) / n * 1000:6.2f} ms per put", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=300)
    parser.add_argument("--bytes", type=int, default=3000)
    args = parser.parse_args()

    from orderedstream.core import objectstore
    from orderedstream.dev.services.s3 import S3Server

    work = Path(tempfile.mkdtemp(prefix="s3put-"))
    server = S3Server(work / "s3").start()
    try:
        fs = server.filesystem()
        data = os.urandom(args.bytes)
        local = work / "blob"
        local.write_bytes(data)
        bucket = server.bucket
        print(f"{args.puts} puts of {args.bytes} bytes to {server.endpoint}")
        _time("s3fs pipe_file(mode='create')",
              lambda i: fs.pipe_file(f"{bucket}/a/{i}", data, mode="create"), args.puts)
        _time("obstore put (create)",
              lambda i: objectstore.put(fs, f"{bucket}/b/{i}", data, create=True), args.puts)
        _time("s3fs put_file", lambda i: fs.put_file(str(local), f"{bucket}/c/{i}"), args.puts)
        _time("obstore put of the file",
              lambda i: objectstore.put(fs, f"{bucket}/d/{i}", str(local)), args.puts)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
