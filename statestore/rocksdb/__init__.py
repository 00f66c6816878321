"""The RocksDB (rocksdict) backend: the only package in ``statestore`` that imports rocksdict.

``RocksDBStateStore`` (``store``) opens ``RocksDBStatePartition``s (``partition``, built from
``db``, ``writes``, ``expiry`` and ``committer``); ``localcopy`` is the locked local directory
of a partition, ``changelog`` the write logs, ``options`` the RocksDB tuning.
"""

from orderedstream.statestore.rocksdb.partition import RocksDBStatePartition
from orderedstream.statestore.rocksdb.store import RocksDBStateStore

__all__ = ["RocksDBStatePartition", "RocksDBStateStore"]
