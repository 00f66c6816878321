"""State store at scale: restore time from S3, snapshot bytes vs bytes changed, RSS at 100M keys.

Usage::

    .venv/bin/python -m benchmarks.statestore_scale restore --keys 1000000,10000000
    .venv/bin/python -m benchmarks.statestore_scale hold --keys 100000000 \\
        --block-cache-mb 256 --memtable-mb 128 --write-buffer-mb 64

``restore``: one child process writes N keys (``put_many``) to a partition on S3 (SeaweedFS
started locally unless ``--s3-endpoint`` is given) and commits version 0, rewrites 0.1% of the
keys and commits version 1 (bytes uploaded vs bytes changed); a second, fresh child process
opens version 1 on an empty local dir (download + open) and reads a sample back.

``hold``: one child process writes N keys into one partition (local file location, no
commit), then does random gets; its RSS is sampled every second and compared with the
configured RocksDB memory bound (block cache, which the memtables are also charged to, plus the
memtable budget) on top of the interpreter's own RSS before the DB was opened.

Each phase runs in its own process so peak RSS is that phase's. Results go to
``--out`` (default ``benchmarks/reports/statestore-scale-<time>/``) as ``<phase>.json`` and
``<phase>.md``. Keys are 14 bytes in a pseudo-random order (a bijection of the counter),
values 8 bytes (``BytesCodec``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_MULT = 2654435761  # odd: i -> i * _MULT mod 2**32 is a bijection, so keys are distinct
_CHUNK = 100_000


def key_of(i: int) -> bytes:
    return b"key-%010d" % ((i * _MULT) & 0xFFFFFFFF)


def value_of(i: int, salt: int = 0) -> bytes:
    """8 bytes: the key's last 8 digits (``salt`` reverses them: a changed value)."""
    v = key_of(i)[-8:]
    return v[::-1] if salt else v


def items(n: int, start: int = 0) -> Iterator[tuple[bytes, bytes]]:
    for i in range(start, n):
        k = b"key-%010d" % ((i * _MULT) & 0xFFFFFFFF)
        yield k, k[-8:]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def du_bytes(path: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


class RssSampler:
    """Samples this process's RSS every ``interval`` seconds (max and a coarse timeline)."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.max_mb = 0.0
        self.timeline: list[tuple[float, float, str]] = []
        self.phase = "start"
        self._stop = threading.Event()
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last_logged = -1e9
        while not self._stop.wait(self.interval):
            now = time.perf_counter() - self._start
            mb = rss_mb()
            self.max_mb = max(self.max_mb, mb)
            if now - last_logged >= 30:
                self.timeline.append((round(now, 1), round(mb, 1), self.phase))
                last_logged = now

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---- child phases ------------------------------------------------------------------------------
def _options(args: dict[str, Any], local_dir: str) -> Any:
    from orderedstream.statestore import BytesCodec, StateStoreOptions

    return StateStoreOptions(
        local_dir=local_dir, codec=BytesCodec(),
        block_cache_bytes=args["block_cache_mb"] << 20,
        memtable_budget_bytes=args["memtable_mb"] << 20,
        write_buffer_bytes=args["write_buffer_mb"] << 20,
        exact_key_count=args["exact_key_count"])


def child_write(args: dict[str, Any]) -> dict[str, Any]:
    """Write N keys to S3, commit v0; rewrite 0.1% of them, commit v1."""
    from orderedstream.statestore import EMPTY_VERSION, StateLocation
    from orderedstream.statestore.rocksdb.store import RocksDBStateStore

    n = args["keys"]
    store = RocksDBStateStore(StateLocation(args["url"], storage_options=args["storage_options"]),
                              _options(args, args["local_dir"]))
    out: dict[str, Any] = {"keys": n}
    with store.open(0, EMPTY_VERSION) as part:
        start = time.perf_counter()
        for lo in range(0, n, _CHUNK):
            part.put_many(items(min(n, lo + _CHUNK), start=lo))
        out["put_many_seconds"] = time.perf_counter() - start
        first = part.commit(0)
        changed = max(1, n // 1000)
        step = n // changed
        rewritten = [(key_of(i), value_of(i, 1)) for i in range(0, n, step)][:changed]
        part.put_many(rewritten)
        second = part.commit(1)
    out.update(first_commit=first.to_dict(), second_commit=second.to_dict(),
               keys_changed=len(rewritten),
               bytes_changed=sum(len(k) + len(v) + 1 for k, v in rewritten))
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def child_restore(args: dict[str, Any]) -> dict[str, Any]:
    """Open version 1 on an empty local dir (download + open); read a sample back."""
    from orderedstream.statestore import StateLocation
    from orderedstream.statestore.rocksdb.store import RocksDBStateStore

    n = args["keys"]
    store = RocksDBStateStore(StateLocation(args["url"], storage_options=args["storage_options"]),
                              _options(args, args["local_dir"]))
    start = time.perf_counter()
    part = store.open(0, 1)
    opened = time.perf_counter() - start
    try:
        num_keys = part.num_keys()
        rng = random.Random(7)
        sample = [rng.randrange(n) for _ in range(100_000)]
        t = time.perf_counter()
        wrong = sum(1 for i in sample
                    if part.get(key_of(i)) not in (value_of(i), value_of(i, 1)))
        gets = len(sample) / (time.perf_counter() - t)
    finally:
        part.close()
    if num_keys != n or wrong:
        raise AssertionError(f"restored {num_keys} keys (expected {n}), {wrong} sampled keys "
                             "missing")
    return {"keys": n, "restore_seconds": opened, "restore": store.last_restore.to_dict(),
            "num_keys": num_keys, "random_gets_per_s_after_restore": gets,
            "peak_rss_mb": peak_rss_mb()}


def child_hold(args: dict[str, Any]) -> dict[str, Any]:
    """Write N keys into one partition and hold them; then random gets. RSS sampled."""
    from orderedstream.statestore import EMPTY_VERSION, StateLocation
    from orderedstream.statestore.rocksdb.store import RocksDBStateStore

    n = args["keys"]
    base_rss = rss_mb()
    opts = _options(args, args["local_dir"])
    store = RocksDBStateStore(StateLocation(f"file://{args['local_dir']}/remote"), opts)
    out: dict[str, Any] = {"keys": n, "interpreter_rss_mb_before_open": base_rss,
                           "block_cache_mb": args["block_cache_mb"],
                           "memtable_budget_mb": args["memtable_mb"],
                           "write_buffer_mb": args["write_buffer_mb"],
                           "exact_key_count": args["exact_key_count"]}
    bound = args["block_cache_mb"] + args["memtable_mb"]
    out["configured_rocksdb_bound_mb"] = bound
    with RssSampler() as sampler, store.open(0, EMPTY_VERSION) as part:
        sampler.phase = "put_many"
        start = time.perf_counter()
        progress = max(_CHUNK, n // 20)
        for lo in range(0, n, _CHUNK):
            part.put_many(items(min(n, lo + _CHUNK), start=lo))
            if (lo + _CHUNK) % progress == 0:
                el = time.perf_counter() - start
                print(f"  {lo + _CHUNK:,} keys in {el:.0f}s, rss {rss_mb():.0f} MiB",
                      file=sys.stderr, flush=True)
        out["put_many_seconds"] = time.perf_counter() - start
        out["put_many_keys_per_s"] = n / out["put_many_seconds"]
        out["rss_mb_after_writes"] = rss_mb()
        out["num_keys"] = part.num_keys()
        sampler.phase = "random_get"
        rng = random.Random(11)
        gets = args["gets"]
        start = time.perf_counter()
        missing = 0
        for _ in range(gets):
            i = rng.randrange(n)
            if part.get(key_of(i)) != value_of(i):
                missing += 1
        out["random_gets"] = gets
        out["random_get_seconds"] = time.perf_counter() - start
        out["random_gets_per_s"] = gets / out["random_get_seconds"]
        out["random_get_missing"] = missing
        out["rss_mb_after_gets"] = rss_mb()
        db = part._db  # noqa: SLF001 - measurement only
        out["disk_bytes"] = du_bytes(db.path())
        for prop, name in (("rocksdb.block-cache-usage", "block_cache_usage"),
                           ("rocksdb.estimate-table-readers-mem", "table_readers_mem"),
                           ("rocksdb.cur-size-all-mem-tables", "memtables")):
            out[f"rocksdb_{name}_mb"] = (db.property_int_value(prop) or 0) / (1 << 20)
    out["sampled_max_rss_mb"] = sampler.max_mb
    out["peak_rss_mb"] = peak_rss_mb()
    out["rss_timeline"] = sampler.timeline
    out["peak_rss_over_interpreter_mb"] = out["peak_rss_mb"] - base_rss
    out["within_bound"] = out["peak_rss_over_interpreter_mb"] <= bound
    exact_ok = out["num_keys"] == n or not args["exact_key_count"]  # else an estimate
    if not exact_ok or missing:
        raise AssertionError(f"held {out['num_keys']} keys (expected {n}), {missing} of "
                             f"{gets} sampled keys missing or wrong")
    return out


_CHILDREN = {"write": child_write, "restore": child_restore, "hold": child_hold}


def run_child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one phase in a fresh interpreter (its own peak RSS); return its JSON result."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.statestore_scale", "--child", kind],
                          input=json.dumps(args), text=True, stdout=subprocess.PIPE,
                          check=False, cwd=Path(__file__).resolve().parent.parent)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} phase failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- drivers -------------------------------------------------------------------------------------
def run_restore(ns: argparse.Namespace, out_dir: Path) -> list[dict[str, Any]]:
    from orderedstream.core.storage import s3_endpoint_options
    from orderedstream.dev.services.s3 import S3Server

    work = Path(tempfile.mkdtemp(prefix="statestore-scale-", dir=ns.workdir))
    server = None
    try:
        if ns.s3_endpoint:
            endpoint, storage = ns.s3_endpoint, s3_endpoint_options(ns.s3_endpoint)
        else:
            server = S3Server(work / "s3").start()
            endpoint, storage = server.endpoint, server.storage_options
        rows = []
        for n in ns.keys:
            base = {**_common(ns), "keys": n, "storage_options": storage,
                    "url": f"s3://lake/statestore-scale/{int(time.time())}-{n}"}
            print(f"restore: writing {n:,} keys to S3 at {endpoint}", file=sys.stderr, flush=True)
            written = run_child("write", {**base, "local_dir": str(work / f"w-{n}")})
            shutil.rmtree(work / f"w-{n}", ignore_errors=True)
            restored = run_child("restore", {**base, "local_dir": str(work / f"r-{n}")})
            shutil.rmtree(work / f"r-{n}", ignore_errors=True)
            row = {"keys": n, "write": written, "restore": restored}
            rows.append(row)
            print(json.dumps(_restore_line(row)), file=sys.stderr, flush=True)
        _write(out_dir, "restore", rows, _restore_md(rows))
        return rows
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _restore_line(row: dict[str, Any]) -> dict[str, Any]:
    w, r = row["write"], row["restore"]
    return {"keys": row["keys"], "restore_s": round(r["restore_seconds"], 2),
            "bytes_downloaded": r["restore"]["bytes_downloaded"],
            "files_downloaded": r["restore"]["files_downloaded"],
            "full_snapshot_bytes": w["first_commit"]["bytes_total"],
            "incremental_bytes_uploaded": w["second_commit"]["bytes_uploaded"],
            "bytes_changed": w["bytes_changed"], "keys_changed": w["keys_changed"],
            "write_put_many_s": round(w["put_many_seconds"], 1),
            "first_commit_s": round(w["first_commit"]["commit_seconds"], 1),
            "restore_peak_rss_mb": round(r["peak_rss_mb"], 1)}


def _restore_md(rows: list[dict[str, Any]]) -> str:
    lines = ["| keys | restore s (download+open) | bytes downloaded | files | full snapshot bytes "
             "| keys changed | bytes changed | incremental bytes uploaded | restore peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        d = _restore_line(row)
        lines.append(f"| {d['keys']:,} | {d['restore_s']} | {d['bytes_downloaded']:,} | "
                     f"{d['files_downloaded']} | {d['full_snapshot_bytes']:,} | "
                     f"{d['keys_changed']:,} | {d['bytes_changed']:,} | "
                     f"{d['incremental_bytes_uploaded']:,} | {d['restore_peak_rss_mb']} |")
    return "\n".join(lines) + "\n"


def run_hold(ns: argparse.Namespace, out_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for n in ns.keys:
        work = Path(tempfile.mkdtemp(prefix="statestore-hold-", dir=ns.workdir))
        try:
            print(f"hold: writing {n:,} keys", file=sys.stderr, flush=True)
            row = run_child("hold", {**_common(ns), "keys": n, "local_dir": str(work),
                                     "gets": ns.gets})
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "rss_timeline"}),
              file=sys.stderr, flush=True)
    lines = ["| keys | put_many s | keys/s | RSS before open MiB | peak RSS MiB | peak - before "
             "| configured bound MiB | within | random gets/s | disk GiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['keys']:,} | {r['put_many_seconds']:.0f} | "
                     f"{r['put_many_keys_per_s']:,.0f} | {r['interpreter_rss_mb_before_open']:.0f} "
                     f"| {r['peak_rss_mb']:.0f} | {r['peak_rss_over_interpreter_mb']:.0f} | "
                     f"{r['configured_rocksdb_bound_mb']} | {r['within_bound']} | "
                     f"{r['random_gets_per_s']:,.0f} | {r['disk_bytes'] / (1 << 30):.2f} |")
    _write(out_dir, "hold", rows, "\n".join(lines) + "\n")
    return rows


def _common(ns: argparse.Namespace) -> dict[str, Any]:
    return {"block_cache_mb": ns.block_cache_mb, "memtable_mb": ns.memtable_mb,
            "write_buffer_mb": ns.write_buffer_mb, "exact_key_count": not ns.estimate_count}


def _write(out_dir: Path, phase: str, rows: list[dict[str, Any]], md: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{phase}.json").write_text(json.dumps(rows, indent=2))
    (out_dir / f"{phase}.md").write_text(md)
    print(md)
    print(f"written: {out_dir / (phase + '.json')}, {out_dir / (phase + '.md')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", nargs="?", choices=["restore", "hold"])
    parser.add_argument("--keys", default=None,
                        help="comma-separated key counts (restore: 1000000,10000000; "
                             "hold: 100000000)")
    parser.add_argument("--gets", type=int, default=1_000_000, help="random gets (hold)")
    parser.add_argument("--block-cache-mb", type=int, default=256)
    parser.add_argument("--memtable-mb", type=int, default=128)
    parser.add_argument("--write-buffer-mb", type=int, default=64)
    parser.add_argument("--estimate-count", action="store_true",
                        help="exact_key_count=False (RocksDB's estimate)")
    parser.add_argument("--s3-endpoint", default=None)
    parser.add_argument("--workdir", default=None, help="where local copies go (temp dir)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.child:
        result = _CHILDREN[ns.child](json.loads(sys.stdin.read()))
        print(json.dumps(result))
        return 0
    if ns.phase is None:
        parser.error("choose a phase: restore or hold")
    default = "1000000,10000000" if ns.phase == "restore" else "100000000"
    ns.keys = [int(k.replace("_", "")) for k in (ns.keys or default).split(",")]
    out = ns.out or (Path(__file__).resolve().parent / "reports"
                     / f"statestore-scale-{time.strftime('%Y%m%d-%H%M%S')}")
    (run_restore if ns.phase == "restore" else run_hold)(ns, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
