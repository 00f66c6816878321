"""rocksdict ``Options`` built from ``StateStoreOptions``: raw bytes, bounded memory, no WAL.

One block cache per process and store options (data, index and filter blocks charged to it)
and one write buffer manager charging memtables to that cache bound a worker's RocksDB memory.
Index and filters are partitioned, so even huge SSTs cache in small blocks.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import rocksdict

from orderedstream.core.tuning import process_tuning
from orderedstream.core.workerheap import glibc_function
from orderedstream.statestore.options import StateStoreOptions

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameters (malloc.h)
_M_ARENA_MAX = -8


def _tune_glibc_malloc() -> None:
    """One malloc arena and a fixed 128 KiB mmap threshold for this process (glibc only).

    With glibc's defaults RSS overshot the memory bound by ~17% (peak RSS 446 MiB above the
    interpreter against a 384 MiB bound at 100M keys): RocksDB's flush/compaction threads each
    get their own arena whose freed memory the reading thread's block cache cannot reuse, and
    once a freed memtable arena block raises glibc's dynamic mmap threshold, later 2-8 MiB
    memtable blocks come from the heap and stay resident after the memtable is freed.
    Must run before RocksDB starts its threads; explicit MALLOC_* / GLIBC_TUNABLES win. A
    process-wide change: only with ``ORDEREDSTREAM_PROCESS_TUNING=1`` (``core.tuning``)."""
    if not process_tuning() or os.environ.get("GLIBC_TUNABLES"):
        return
    mallopt = glibc_function("mallopt")
    if mallopt is None:  # not Linux, or not glibc
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(_M_ARENA_MAX, 1)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        mallopt(_M_MMAP_THRESHOLD, 128 << 10)


@functools.lru_cache(maxsize=8)
def _shared(block_cache_bytes: int, memtable_budget_bytes: int) -> tuple[Any, Any]:
    _tune_glibc_malloc()
    cache = rocksdict.Cache(block_cache_bytes)
    manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
        memtable_budget_bytes, False, cache)
    return cache, manager


def make_options(opts: StateStoreOptions, *, raw_mode: bool = True) -> rocksdict.Options:
    """Options for the DB and every column family (they must agree on raw mode).

    The store always uses raw mode; ``raw_mode=False`` exists so benchmarks can give plain
    rocksdict (which pickles values itself) exactly the same tuning."""
    cache, manager = _shared(opts.block_cache_bytes, opts.memtable_budget_bytes)
    o = rocksdict.Options(raw_mode=raw_mode)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_bloom_filter(10, False)
    # Partitioned index and filters: a compacted 64 MiB SST has a multi-MiB full filter, larger
    # than one shard of the block cache, so it was re-read on every get (25x slower random gets
    # at 3M keys with a 16 MiB cache). Partitions are 4 KiB blocks that cache like data blocks.
    table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    table.set_pin_top_level_index_and_filter(True)
    o.set_block_based_table_factory(table)
    o.set_write_buffer_size(opts.write_buffer_bytes)
    o.set_max_write_buffer_number(opts.max_write_buffers)
    o.set_write_buffer_manager(manager)
    o.set_max_open_files(512)
    o.set_compression_type(rocksdict.DBCompressionType.lz4())
    # RocksDB starts a new info LOG at every open and keeps 1,000 old ones by default: the
    # ordered stage opens each partition once per batch, so a local copy collected a
    # LOG.old file per batch. Two are enough to read what the last opens said.
    o.set_keep_log_file_num(2)
    # At open RocksDB loads the SSTs' table readers with up to 16 threads it starts per
    # column family (the default), so every open of a 4-family partition started ~46
    # threads: 16 ms per open of a small local copy, 5-6 ms with one. The files are local
    # and page-cached (just written or downloaded), so loading them is CPU work, and the
    # stage already runs one worker per core.
    o.set_max_file_opening_threads(1)
    return o


def write_options() -> rocksdict.WriteOptions:
    """No WAL: durability comes from committed snapshots, a dirty local copy is restored."""
    w = rocksdict.WriteOptions()
    # A property at run time; rocksdict's stub declares a method of that name.
    w.disable_wal = True  # type: ignore[method-assign, assignment]
    return w
