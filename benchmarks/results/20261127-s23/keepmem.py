"""RSS of one process after 8 partitions of 25k keys each were committed and closed, kept open
(``keep_open=16``) or closed (``0``), session 23.

Usage: ``.venv/bin/python benchmarks/results/20261127-s23/keepmem.py 0|16``
"""

from __future__ import annotations

import gc
import sys
import tempfile

import psutil

from orderedstream.statestore import EMPTY_VERSION, StateLocation, StateStoreOptions
from orderedstream.statestore.rocksdb.store import RocksDBStateStore


def rss_mib() -> int:
    return psutil.Process().memory_info().rss >> 20


def main(keep: int) -> None:
    work = tempfile.mkdtemp()
    store = RocksDBStateStore(StateLocation(f"file://{work}/remote"),
                              StateStoreOptions(local_dir=f"{work}/local", keep_open=keep,
                                                changelog=True))
    print("start", rss_mib())
    for partition in range(8):
        part = store.open(partition, EMPTY_VERSION)
        for i in range(25_000):
            part.put(f"session-{i}", {"seq": i, "payload": "x" * 150}, space="values")
            part.put(f"t-{i}", i, space="timers")
        part.commit(0)
        part.close()
        gc.collect()
    print(f"after 8 partitions, keep_open={keep}", rss_mib())


if __name__ == "__main__":
    main(int(sys.argv[1]))
