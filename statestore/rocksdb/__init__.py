"""The RocksDB (rocksdict) backend: the only package in ``statestore`` that imports rocksdict."""

from statestore.rocksdb.partition import RocksDBStatePartition

__all__ = ["RocksDBStatePartition"]
