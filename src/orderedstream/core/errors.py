"""The pack's exceptions: one root, one subclass per kind of failure.

Messages name what was involved (topic, partition, offset, path, option) and what to do.
"""

from __future__ import annotations


class OrderedStreamError(Exception):
    """Root of every error this pack raises on purpose."""


class OptionError(OrderedStreamError, ValueError):
    """An option is unknown, malformed, or conflicts with another option."""


class DataLossError(OrderedStreamError):
    """Kafka records that should have been read are gone (retention, topic recreated, ...)."""


class ServiceError(OrderedStreamError):
    """A local service (Kafka broker, S3 server, Spark cluster) failed to start or answer."""


class CommitConflictError(OrderedStreamError):
    """Another writer committed first, or this writer's epoch was superseded (fenced)."""


class FencedError(CommitConflictError):
    """A writer from an older epoch tried to commit; a newer run owns the output."""


class CorruptStateError(OrderedStreamError):
    """A state snapshot file is missing or fails its checksum."""


class SchemaMismatchError(OrderedStreamError, ValueError):
    """A batch's schema cannot be appended to the table's schema."""


class StateLockedError(OrderedStreamError):
    """A local RocksDB state copy is held by another process (one process per copy)."""


class StateNotFoundError(OrderedStreamError):
    """A state version that was asked for was never published at that location."""


class StateTransactionError(OrderedStreamError):
    """A state partition was used out of order (write after prepare, commit of a closed one)."""


class KafkaUnavailableError(OrderedStreamError):
    """The Kafka cluster did not answer within the source's bounded retry time."""


class OrderViolationError(OrderedStreamError):
    """Rows of a Kafka partition reached the ordered stage out of offset order, twice, or split."""


class ShimBuildError(OrderedStreamError):
    """The JVM shim (jvm-shim/) could not be built: Maven missing, or its build failed."""


class PlacementError(OrderedStreamError, ValueError):
    """A placement request names a partition the DataFrame lacks, or a state key is empty."""


class CorruptLogError(OrderedStreamError):
    """A commit record (or a derived Spark log file) is unreadable, vanished, or malformed."""


class UnsupportedFormatError(OrderedStreamError):
    """Stored data is in a format this version cannot read (written by a newer version)."""


class UnsupportedStorageError(OrderedStreamError):
    """A filesystem cannot do what fencing needs (exclusive create, compare-and-swap)."""


class TableIntegrityError(OrderedStreamError):
    """A table's files disagree with its commit log (a file missing, rows lost in a rewrite)."""


class StateValueError(OrderedStreamError, ValueError):
    """A state key or value cannot be stored: wrong type, or not what the codec accepts."""


class UserFunctionError(OrderedStreamError):
    """The user's function returned something that is not rows of the output schema."""


class InvariantError(OrderedStreamError):
    """An internal invariant of the pack does not hold: a bug, reported with what was seen."""


class KafkaAuthenticationError(OrderedStreamError):
    """The Kafka cluster refused the client's login (SASL or TLS credentials)."""


class StateKeyError(OrderedStreamError, KeyError):
    """A key's state was read where it has none (``GroupState.get`` without ``exists``)."""
