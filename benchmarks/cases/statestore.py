"""State store benchmark: overhead vs raw rocksdict, incremental snapshot bytes, restore time.

Usage: ``.venv/bin/python -m benchmarks.statestore_bench [--keys N] [--s3-endpoint URL]``
(file:// in a temp dir unless an S3 endpoint is given). Also usable as a harness case:
``run(ctx) -> list[Result]`` with ``ctx.scale["keys"]``.

Expected output: one line per figure, e.g. ``put_many keys/s ours=... raw=... ratio=0.9x``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import rocksdict

from benchmarks.common import CaseContext, Result, peak_rss_mb
from statestore import EMPTY_VERSION, BytesCodec, StateLocation, StateStoreOptions
from statestore.store import StateStore


def _keys(n: int) -> list[bytes]:
    return [b"key-%010d" % ((i * 2654435761) % (1 << 32)) for i in range(n)]


def _raw_rocksdict(path: str, keys: list[bytes], value: bytes) -> tuple[float, float, float]:
    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(path, opts)
    wo = rocksdict.WriteOptions()
    wo.disable_wal = True
    db.set_write_options(wo)
    start = time.perf_counter()
    for i in range(0, len(keys), 10_000):
        batch = rocksdict.WriteBatch(raw_mode=True)
        for k in keys[i:i + 10_000]:
            batch.put(k, value)
        db.write(batch)
    put_many = len(keys) / (time.perf_counter() - start)
    sample = keys[: min(len(keys), 200_000)]
    start = time.perf_counter()
    for k in sample:
        db[k] = value
    put = len(sample) / (time.perf_counter() - start)
    start = time.perf_counter()
    for k in sample:
        db.get(k)
    get = len(sample) / (time.perf_counter() - start)
    db.close()
    return put_many, put, get


def measure(location: StateLocation, n: int, workdir: str) -> list[Result]:
    value = b"v" * 100
    keys = _keys(n)
    raw_put_many, raw_put, raw_get = _raw_rocksdict(os.path.join(workdir, "raw"), keys, value)
    results: list[Result] = []
    for exact in (True, False):
        store = StateStore(location, StateStoreOptions(
            local_dir=os.path.join(workdir, f"local-{exact}"), codec=BytesCodec(),
            exact_key_count=exact))
        prefix = "" if exact else "no-count "
        with store.open(int(exact), EMPTY_VERSION) as part:
            start = time.perf_counter()
            part.put_many((k, value) for k in keys)
            ours_put_many = n / (time.perf_counter() - start)
            sample = keys[: min(n, 200_000)]
            start = time.perf_counter()
            for k in sample:
                part.put(k, value)
            ours_put = len(sample) / (time.perf_counter() - start)
            start = time.perf_counter()
            for k in sample:
                part.get(k)
            ours_get = len(sample) / (time.perf_counter() - start)
            first = part.commit(0)
            for k in keys[:1000]:
                part.put(k, b"w" * 100)
            second = part.commit(1)
        how = f"{n} keys, 100-byte values, WAL off, same machine, same run"
        for metric, ours, raw in ((f"{prefix}put_many keys/s", ours_put_many, raw_put_many),
                                  (f"{prefix}put keys/s", ours_put, raw_put),
                                  (f"{prefix}get keys/s", ours_get, raw_get)):
            results.append(Result("statestore", metric, "keys/s", ours, raw, "raw rocksdict",
                                  how))
        if exact:
            results.append(Result(
                "statestore", "incremental commit bytes uploaded (1000 keys changed)", "bytes",
                second.bytes_uploaded, first.bytes_uploaded, "full snapshot bytes",
                "second commit after rewriting 1000 keys vs the first full commit",
                higher_is_better=False, extra={"first": first.to_dict(),
                                               "second": second.to_dict()}))
            fresh = StateStore(location, StateStoreOptions(
                local_dir=os.path.join(workdir, "fresh"), codec=BytesCodec()))
            start = time.perf_counter()
            with fresh.open(1, 1) as part:
                assert part.num_keys() == n
            results.append(Result("statestore", f"restore {n} keys", "s",
                                  time.perf_counter() - start, None, None,
                                  "open version 1 on an empty local dir (download + open)",
                                  higher_is_better=False,
                                  extra=fresh.last_restore.to_dict()))
    results.append(Result("statestore", "peak RSS", "MiB", peak_rss_mb(children=False), None,
                          None, "whole benchmark process", higher_is_better=False))
    return results


def run(ctx: CaseContext) -> list[Result]:
    n = ctx.scale.get("keys", 1_000_000)
    location = StateLocation(ctx.s3_url("bench-state", str(int(time.time()))),
                             ctx.storage_options)
    return measure(location, n, tempfile.mkdtemp(dir=ctx.workdir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--s3-endpoint", default=None)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="statestore-bench-")
    location: Any
    if args.s3_endpoint:
        from orderedstream.services.s3 import s3_storage_options

        location = StateLocation(f"s3://lake/bench-state/{int(time.time())}",
                                 s3_storage_options(args.s3_endpoint))
    else:
        location = StateLocation(f"file://{workdir}/remote")
    for r in measure(location, args.keys, workdir):
        ratio = f" ratio={r.ratio:.2f}x" if r.ratio else ""
        print(f"{r.metric}: ours={r.ours:,.1f} {r.unit}"
              + (f" {r.baseline_name}={r.baseline:,.1f}" if r.baseline is not None else "")
              + ratio)


if __name__ == "__main__":
    main()
