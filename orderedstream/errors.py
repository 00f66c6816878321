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
