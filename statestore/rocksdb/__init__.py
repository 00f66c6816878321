"""The RocksDB (rocksdict) backend: the only package in ``statestore`` that imports rocksdict."""

from orderedstream.statestore.rocksdb.partition import RocksDBStatePartition

__all__ = ["RocksDBStatePartition"]
