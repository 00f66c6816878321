"""Driver-side Kafka metadata: topics, topic ids, partitions and offsets for planning.

One confluent_kafka ``AdminClient`` per source reader, created lazily and reused across triggers
(it runs in Spark's long-lived planner worker on the driver; it is never pickled). Every call
retries while the cluster does not answer, up to ``brokerTimeoutMs``, then raises
:class:`KafkaUnavailableError` naming the bootstrap servers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from orderedstream.core.errors import InvariantError, KafkaUnavailableError, OptionError
from orderedstream.python_datasource.client_config import (
    ClientErrors,
    admin_settings,
    client_error,
)
from orderedstream.python_datasource.options import OrderedKafkaOptions, StartSpec

log = logging.getLogger(__name__)
T = TypeVar("T")
TP = tuple[str, int]


@dataclass(frozen=True)
class TopicInfo:
    """A topic as it exists now: its Kafka topic id and partition numbers."""

    name: str
    topic_id: str
    partitions: tuple[int, ...]


class KafkaMetadata:
    """Metadata and offset look-ups for one source on the driver (reused admin client)."""

    def __init__(self, options: OrderedKafkaOptions) -> None:
        self.options = options
        self._admin: Any = None
        self._errors = ClientErrors("Kafka metadata (driver)", options.secrets)

    # -- client ------------------------------------------------------------------------
    def admin(self) -> Any:
        """The reused AdminClient (created on first use)."""
        if self._admin is None:
            from confluent_kafka import KafkaException
            from confluent_kafka.admin import AdminClient

            settings = admin_settings(self.options.client_config())
            try:
                self._admin = AdminClient(settings, error_cb=self._errors)
            except (KafkaException, ValueError, TypeError) as exc:
                raise client_error(exc, self.options.secrets) from None  # no chained secrets
        return self._admin

    def close(self) -> None:
        """Drop the admin client (librdkafka frees it when unreferenced)."""
        self._admin = None

    def _timeout(self, deadline: float) -> float:
        return max(1.0, min(10.0, deadline - time.monotonic()))

    def _retry(self, what: str, call: Callable[[float], T]) -> T:
        """Run ``call(timeout_s)`` until it succeeds or ``brokerTimeoutMs`` passed."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.options.broker_timeout_ms / 1000
        delay = 0.2
        while True:
            try:
                return call(self._timeout(deadline))
            except (KafkaException, FutureTimeout) as exc:
                if self._admin is not None:
                    self._admin.poll(0)  # serves error_cb
                self._errors.check()  # a refused login fails now, not at brokerTimeoutMs
                err = exc.args[0] if exc.args and hasattr(exc.args[0], "fatal") else None
                if err is not None and err.fatal():
                    raise
                if time.monotonic() + delay >= deadline:
                    raise KafkaUnavailableError(
                        f"Kafka at {self.options.bootstrap_servers} did not answer {what} within "
                        f"brokerTimeoutMs={self.options.broker_timeout_ms}: {exc!r}. Check that "
                        "the brokers are up and reachable, or raise brokerTimeoutMs") from exc
                log.warning("orderedkafka: %s failed (%r); retrying", what, exc)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- topics ------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicInfo]:
        """The subscription's topics that exist now (missing subscribed topics are absent)."""
        if self.options.strategy == "subscribePattern":
            names = [n for n in self._retry(
                "listing topics", lambda t: self.admin().list_topics(timeout=t)).topics
                if self.options.matches(n)]
        elif self.options.strategy == "subscribe":
            names = list(self.options.topics)
        else:
            names = list(self.options.assignment)
        infos = self.describe(names)
        if self.options.strategy == "assign":
            infos = {n: TopicInfo(n, i.topic_id, tuple(p for p in i.partitions
                                                       if p in self.options.assignment[n]))
                     for n, i in infos.items()}
        return infos

    def describe(self, names: Iterable[str]) -> dict[str, TopicInfo]:
        """Topic id and partitions of each existing topic in ``names`` (internal topics are skipped,
        as a Java consumer's pattern subscription does; missing ones are absent).

        Parameters
        ----------
        names
            The topics' names.

        Returns
        -------
        dict[str, TopicInfo]
            Topic name -> what it holds now.

        Raises
        ------
        KafkaUnavailableError
            The cluster did not answer within ``brokerTimeoutMs``.
        KafkaAuthenticationError
            The cluster refused the client's login.
        KafkaException
            A fatal librdkafka error, raised as it is.
        OptionError
            The admin client refused a ``kafka.*`` setting.

        Runs on
        -------
        driver
        """
        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        names = sorted(set(names))
        if not names:
            return {}

        def call(timeout: float) -> dict[str, TopicInfo]:
            futures = self.admin().describe_topics(TopicCollection(names),
                                                   request_timeout=timeout)
            result: dict[str, TopicInfo] = {}
            for name, future in futures.items():
                try:
                    desc = future.result(timeout + 5)
                except KafkaException as exc:
                    if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        continue  # not there (yet, or any more)
                    raise
                if desc.is_internal:
                    continue
                result[name] = TopicInfo(name, str(desc.topic_id),
                                         tuple(sorted(p.id for p in desc.partitions)))
            return result

        return self._retry("describing topics", call)

    # -- offsets -----------------------------------------------------------------------
    def _list_offsets(self, specs: Mapping[TP, Any], what: str) -> dict[TP, int]:
        from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition

        if not specs:
            return {}
        level = (IsolationLevel.READ_COMMITTED if self.options.read_committed
                 else IsolationLevel.READ_UNCOMMITTED)

        def call(timeout: float) -> dict[TP, int]:
            futures = self.admin().list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=level, request_timeout=timeout)
            result: dict[TP, int] = {}
            for tp, future in futures.items():
                try:
                    result[(tp.topic, tp.partition)] = future.result(timeout + 5).offset
                except KafkaException as exc:
                    if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        continue  # partition vanished: the caller reports it
                    raise
            return result

        return self._retry(what, call)

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Log start offset per partition.

        Parameters
        ----------
        tps
            The (topic, partition) pairs.

        Returns
        -------
        dict[tuple[str, int], int]
            The offsets; partitions that no longer exist are absent.

        Raises
        ------
        KafkaUnavailableError
            The cluster did not answer within ``brokerTimeoutMs``.
        KafkaAuthenticationError
            The cluster refused the client's login.
        KafkaException
            A fatal librdkafka error, raised as it is.
        OptionError
            The admin client refused a ``kafka.*`` setting.

        Runs on
        -------
        driver
        """
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.earliest() for tp in tps}, "earliest offsets")

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Next offset to be written per partition: the high watermark, or under read_committed the
        last stable offset (open transactions are not readable yet).

        Parameters
        ----------
        tps
            The (topic, partition) pairs.

        Returns
        -------
        dict[tuple[str, int], int]
            The offsets; partitions that no longer exist are absent.

        Raises
        ------
        KafkaUnavailableError
            The cluster did not answer within ``brokerTimeoutMs``.
        KafkaAuthenticationError
            The cluster refused the client's login.
        KafkaException
            A fatal librdkafka error, raised as it is.
        OptionError
            The admin client refused a ``kafka.*`` setting.

        Runs on
        -------
        driver
        """
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.latest() for tp in tps}, "latest offsets")

    def for_timestamps(self, tps: Mapping[TP, int]) -> dict[TP, int | None]:
        """First offset per partition whose record timestamp is at or after the given one.

        Parameters
        ----------
        tps
            (topic, partition) -> epoch milliseconds.

        Returns
        -------
        dict[tuple[str, int], int | None]
            The offsets, None where no record is that recent (or the partition is gone).

        Raises
        ------
        KafkaUnavailableError
            The cluster did not answer within ``brokerTimeoutMs``.
        KafkaAuthenticationError
            The cluster refused the client's login.
        KafkaException
            A fatal librdkafka error, raised as it is.
        OptionError
            The admin client refused a ``kafka.*`` setting.

        Runs on
        -------
        driver
        """
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in tps.items()},
                                   "offsets for timestamps")
        return {tp: (found[tp] if found.get(tp, -1) >= 0 else None) for tp in tps}

    def commit_group_offsets(self, group: str, offsets: Mapping[TP, int]) -> None:
        """Publish processed offsets to consumer group ``group`` (so Kafka's lag tools see
        progress); a partition the broker refuses is retried as an unanswered call.

        Parameters
        ----------
        group
            The consumer group's id.
        offsets
            (topic, partition) -> the next offset to process; nothing is sent when empty.

        Raises
        ------
        KafkaUnavailableError
            The cluster did not answer within ``brokerTimeoutMs``.
        KafkaAuthenticationError
            The cluster refused the client's login.
        KafkaException
            A fatal librdkafka error, raised as it is.
        OptionError
            The admin client refused a ``kafka.*`` setting.

        Runs on
        -------
        driver
        """
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])

        def call(timeout: float) -> None:
            futures = self.admin().alter_consumer_group_offsets([request],
                                                                request_timeout=timeout)
            for future in futures.values():
                done = future.result(timeout + 5)
                for tp in done.topic_partitions:
                    if tp.error is not None:
                        raise KafkaException(tp.error)

        self._retry(f"committing offsets to consumer group {group!r}", call)


def resolve_spec(metadata: KafkaMetadata, spec: StartSpec, tps: list[TP],
                 earliest: Mapping[TP, int], latest: Mapping[TP, int],
                 timestamp_strategy: str = "error") -> dict[TP, int]:
    """Turn a starting or ending option (``StartSpec``) into one offset per partition in ``tps``.

    JSON offsets must name exactly the partitions the subscription has (Spark's rule); -2/-1
    mean earliest/latest. A timestamp with no record at or after it fails under strategy
    ``error`` and means latest under ``latest``.

    Parameters
    ----------
    metadata
        The source's metadata client (asked only for timestamps).
    spec
        The parsed option.
    tps
        The subscription's partitions.
    earliest, latest
        Each partition's earliest and latest offsets.
    timestamp_strategy
        ``error`` or ``latest`` (``startingOffsetsByTimestampStrategy``).

    Returns
    -------
    dict[tuple[str, int], int]
        The offset of each partition.

    Raises
    ------
    OptionError
        JSON offsets or timestamps do not name every partition, or a timestamp has no record
        under strategy ``error``.
    KafkaUnavailableError
        The timestamp look-up got no answer within ``brokerTimeoutMs``.

    Runs on
    -------
    driver
    """
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    given = {(t, p): v for t, parts in spec.offsets.items() for p, v in parts.items()}
    if set(given) != set(tps) and spec.kind == "offsets" or (
            spec.kind == "timestamps" and set(given) != set(tps)):
        raise OptionError(
            f"option '{spec.option}' must name every partition of the subscription (use -2 for "
            f"earliest, -1 for latest): named {sorted(given)}, the subscription has "
            f"{sorted(tps)}")
    if spec.kind == "offsets":
        return {tp: earliest[tp] if v == -2 else latest[tp] if v == -1 else v
                for tp, v in given.items()}
    if spec.kind == "timestamps":
        wanted = given
    elif spec.timestamp_ms is not None:
        wanted = {tp: spec.timestamp_ms for tp in tps}
    else:
        raise InvariantError(f"option '{spec.option}': a timestamp start without a timestamp")
    found = metadata.for_timestamps(wanted)
    result: dict[TP, int] = {}
    for tp, offset in found.items():
        if offset is None:
            if timestamp_strategy != "latest":
                raise OptionError(
                    f"option '{spec.option}': {tp[0]}-{tp[1]} has no record with a timestamp at "
                    f"or after {wanted[tp]}; set startingOffsetsByTimestampStrategy='latest' to "
                    "start at the latest offset instead")
            offset = latest[tp]
        result[tp] = offset
    return result
