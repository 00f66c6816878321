"""rocksdict ``Options`` built from ``StateStoreOptions``: raw bytes, bounded memory, no WAL.

One block cache per process and store options (data, index and filter blocks charged to it)
and one write buffer manager charging memtables to that cache bound a worker's RocksDB memory.
Index and filters are partitioned, so even huge SSTs cache in small blocks
(docs/decisions/0022-rocksdb-partitioned-index.md).
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

    With glibc's defaults RSS overshoots the memory bound: RocksDB's threads each get an arena
    the block cache cannot reuse, and freed memtable blocks stay resident (reasons and figures:
    docs/decisions/0015-memory-bound-per-worker.md). Runs on executors (the Python workers).
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

    The block cache and write buffer manager are shared by every DB this process opens with
    the same sizes (docs/decisions/0015-memory-bound-per-worker.md); index and filters are
    partitioned (docs/decisions/0022-rocksdb-partitioned-index.md).

    Parameters
    ----------
    opts
        The store's options: cache, memtable budget and write buffer sizes.
    raw_mode
        rocksdict's raw mode (bytes in, bytes out). The store always uses it; ``False``
        exists so benchmarks can give plain rocksdict (which pickles values) the same tuning.

    Returns
    -------
    rocksdict.Options
        A new options object (the cache and write buffer manager are shared).

    Runs on
    -------
    both (wherever a partition is opened: executors, and the driver for read-only views)"""
    cache, manager = _shared(opts.block_cache_bytes, opts.memtable_budget_bytes)
    o = rocksdict.Options(raw_mode=raw_mode)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_bloom_filter(10, False)
    # Partitioned index and filters: a large SST's full filter can exceed one block cache shard
    # and be re-read on every get; partitions are small blocks that cache like data blocks
    # (docs/decisions/0022-rocksdb-partitioned-index.md).
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
    # One table-reader thread per open: the files are local and page-cached, so loading them is
    # CPU work, and the stage already runs one worker per core; RocksDB's default starts a
    # pool of threads per column family at every open
    # (docs/decisions/0024-rocksdb-one-file-opening-thread.md).
    o.set_max_file_opening_threads(1)
    return o


def write_options() -> rocksdict.WriteOptions:
    """No WAL: durability comes from committed snapshots, a dirty local copy is restored."""
    w = rocksdict.WriteOptions()
    # A property at run time; rocksdict's stub declares a method of that name.
    w.disable_wal = True  # type: ignore[method-assign, assignment]
    return w
