"""The two sides of the state store hot-path benchmark (``benchmarks.cases.statestore``):
plain rocksdict (pickling or raw, optionally counting keys by hand) and this pack's RocksDB
store, with the same RocksDB tuning, keys and values.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import rocksdict

from orderedstream.statestore import (
    EMPTY_VERSION,
    BytesCodec,
    PickleCodec,
    StateLocation,
    StateStoreOptions,
)
from orderedstream.statestore.rocksdb.options import make_options, write_options
from orderedstream.statestore.rocksdb.store import RocksDBStateStore

OPS = ("put_many", "put", "get", "multi_get", "get+put")
TARGET = 0.9  # ours / rocksdict >= 0.9: at most 10% overhead
_BATCH = 10_000
_MULTI = 1_000


def _keys(n: int) -> list[bytes]:
    return [b"key-%010d" % ((i * 2654435761) % (1 << 32)) for i in range(n)]


def _values(mode: str) -> list[Any]:
    if mode == "bytes":
        return [b"%03d" % j + b"v" * 97 for j in range(1000)]
    return [{"n": j, "session": f"s-{j:06d}", "ts": 1.5 * j, "open": j % 2 == 0}
            for j in range(1000)]


class _Rocksdict:
    """Plain rocksdict, tuned like the store; ``raw`` picks raw_mode (bytes) or pickling.
    With ``counting`` it keeps an exact key count by hand, as the store does by default."""

    def __init__(self, path: str, raw: bool, counting: bool = False) -> None:
        self.raw = raw
        self.counting = counting
        self.count = 0
        self.db = rocksdict.Rdict(path, make_options(StateStoreOptions(), raw_mode=raw))
        self.db.set_write_options(write_options())

    def put_many(self, items: Iterator[tuple[bytes, Any]]) -> None:
        raw = self.raw
        batch = rocksdict.WriteBatch(raw_mode=raw)
        put, n = batch.put, 0
        if not self.counting:  # plain: nothing but the WriteBatch
            for k, v in items:
                put(k, v)
                n += 1
                if n == _BATCH:
                    self.db.write(batch)
                    batch = rocksdict.WriteBatch(raw_mode=raw)
                    put, n = batch.put, 0
            if n:
                self.db.write(batch)
            return
        keys: list[bytes] = []
        for k, v in items:
            put(k, v)
            keys.append(k)
            n += 1
            if n == _BATCH:
                self._write(batch, keys)
                batch = rocksdict.WriteBatch(raw_mode=raw)
                put, n, keys = batch.put, 0, []
        if n:
            self._write(batch, keys)

    def _write(self, batch: rocksdict.WriteBatch, keys: list[bytes]) -> None:
        if keys:  # count the distinct keys that were absent before the batch
            self.count += len({k for k, v in zip(keys, self.db[keys], strict=True)
                               if v is None})
        self.db.write(batch)

    def ops(self) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
        db = self.db
        if not self.counting:
            return db.put, db.get, db.__getitem__
        get, put = db.get, db.put

        def counted_put(k: bytes, v: Any) -> None:
            if get(k) is None:
                self.count += 1
            put(k, v)

        return counted_put, db.get, db.__getitem__

    def rdict(self) -> rocksdict.Rdict:
        return self.db

    def close(self) -> None:
        self.db.close()


class _Ours:
    """One partition of a ``RocksDBStateStore`` on a local file:// location (no commit timed)."""

    def __init__(self, path: str, codec: Any, exact: bool) -> None:
        store = RocksDBStateStore(StateLocation(f"file://{path}/remote"), StateStoreOptions(
            local_dir=os.path.join(path, "local"), codec=codec, exact_key_count=exact))
        self.part = store.open(0, EMPTY_VERSION)

    def put_many(self, items: Iterator[tuple[bytes, Any]]) -> None:
        self.part.put_many(items)

    def ops(self) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
        p = self.part
        return p.put, p.get, p.multi_get

    def rdict(self) -> rocksdict.Rdict:
        self.part.num_keys()  # writes buffered blind puts
        return self.part._db  # noqa: SLF001 - measurement only

    def close(self) -> None:
        self.part.close()


SIDES: dict[str, tuple[str, Callable[[str], Any]]] = {
    # name: (mode, factory)
    "rocksdict pickling": ("objects", lambda p: _Rocksdict(p, raw=False)),
    "rocksdict pickling, counting keys by hand": (
        "objects", lambda p: _Rocksdict(p, raw=False, counting=True)),
    "ours pickle": ("objects", lambda p: _Ours(p, PickleCodec(), exact=True)),
    "ours pickle, no count": ("objects", lambda p: _Ours(p, PickleCodec(), exact=False)),
    "rocksdict raw_mode": ("bytes", lambda p: _Rocksdict(p, raw=True)),
    "rocksdict raw_mode, counting keys by hand": (
        "bytes", lambda p: _Rocksdict(p, raw=True, counting=True)),
    "ours bytes": ("bytes", lambda p: _Ours(p, BytesCodec(), exact=True)),
    "ours bytes, no count": ("bytes", lambda p: _Ours(p, BytesCodec(), exact=False)),
}
PLAIN = {"objects": "rocksdict pickling", "bytes": "rocksdict raw_mode"}
BASELINE = {  # ours -> the rocksdict side doing the same work
    "ours pickle": "rocksdict pickling, counting keys by hand",
    "ours pickle, no count": "rocksdict pickling",
    "ours bytes": "rocksdict raw_mode, counting keys by hand",
    "ours bytes, no count": "rocksdict raw_mode",
}
