"""Executor side: read one offset range with one Kafka consumer, as Arrow batches.

Runs inside Spark's Python worker on an executor (or the ordered stage's, for ``emit =
ranges``). The consumer is the native one (``orderedstream._kafka_native``: librdkafka batches
laid out as Arrow buffers, no Python object per record) or confluent-kafka's, per the option
``reader`` (``consumers``); it comes from the worker's pool (``consumer_pool``), positioned at
the range start. The reader consumes in chunks, builds bounded ``pyarrow.RecordBatch``es and
stops exactly at the range end. Checks on the way: offsets strictly increase, a jump past the
start is loss only when the log start moved past it (otherwise it is a transaction marker, an
aborted record or a compacted key), and the consumer's position must reach the planned end. A
consumer that finished cleanly goes back to the pool; one that failed is closed.

Ending a range before its last offset was delivered (trailing transaction markers, aborted or
compacted records) rests on what the consumer delivered in order: a fetch whose next record is
past the end, or an end-of-log event past it (librdkafka queues it after the records it
covers). The consumer's position alone is not believed: librdkafka's batch consume moves it
one past an end-of-log event, i.e. past a record not delivered yet (``NativeConsumer.position``
undoes that; it once lost a record silently). On a position claim the reader assigns the
consumer again at the first undelivered offset and reads once more; only a fresh read reaching
the same end is believed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from orderedstream.core.errors import DataLossError, KafkaUnavailableError
from orderedstream.core.workerheap import RELEASE_AFTER_RECORDS, release_freed_memory
from orderedstream.python_datasource.client_config import (
    ClientErrors,
    Settings,
    client_error,
    consumer_settings,
)
from orderedstream.python_datasource.consumer_pool import POOL
from orderedstream.python_datasource.consumers import (
    ALL_BROKERS_DOWN,
    AUTO_OFFSET_RESET,
    HEADER_TYPE,
    OFFSET_OUT_OF_RANGE,
    PARTITION_EOF,
    TRANSPORT,
    Fetch,
    kafka_exception,
    open_consumer,
    resolve,
)
from orderedstream.python_datasource.options import OrderedKafkaOptions
from orderedstream.python_datasource.planning import Loss, OffsetRange, enforce

log = logging.getLogger(__name__)

def arrow_schema(include_headers: bool) -> pa.Schema:
    """Arrow schema equal to Spark's ``to_arrow_schema`` of the source's declared schema.

    Parameters
    ----------
    include_headers
        Whether the ``headers`` column is there (option ``includeHeaders``).

    Returns
    -------
    pyarrow.Schema
        The schema of the batches :func:`read_range` yields.

    Runs on
    -------
    executor"""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", "UTC")),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def consumer_config(options: OrderedKafkaOptions) -> Settings:
    """Settings of an executor's consumer for ``options`` (``client_config.consumer_settings``:
    no group management, no auto commit, no silent offset reset).

    Parameters
    ----------
    options
        The source's parsed options, secrets included.

    Returns
    -------
    Settings
        The librdkafka configuration.

    Raises
    ------
    OptionError
        The options' secret values were dropped (an ``emit = ranges`` row) and not restored.

    Runs on
    -------
    executor"""
    return consumer_settings(options.client_config(), options.group_id)


class RangeReader:
    """Reads one :class:`OffsetRange`; iterate :meth:`batches` once."""

    def __init__(self, rng: OffsetRange, options: OrderedKafkaOptions) -> None:
        self.rng = rng
        self.options = options
        self.schema = arrow_schema(options.include_headers)
        self.next_offset = rng.start  # every offset below this was delivered or skipped legally
        self.records = 0
        self.kind = resolve(options.reader)  # OptionError for 'native' without the extension
        self._consumer: Any = None
        self._delivered = -1  # the offset the consumer delivers next without a seek (-1: ?)
        self._chunk = max(1, options.arrow_batch_max_records)
        self._reread_at = -1  # the offset a fresh assignment re-read from to confirm an end
        self._errors = ClientErrors(f"reading {rng.describe()}", options.secrets)

    # -- consumer ------------------------------------------------------------------------
    def _open(self) -> Any:
        settings = consumer_config(self.options)  # OptionError when secrets were dropped
        key = (self.kind, tuple(sorted(settings.items())), self.rng.topic, self.rng.partition)
        POOL.configure(capacity=self.options.consumer_cache_capacity,
                       idle_timeout_s=self.options.consumer_cache_timeout_ms / 1000)

        def create() -> Any:
            try:
                return open_consumer(self.kind, settings, self.rng.topic, self.rng.partition,
                                     self._errors)
            except (ValueError, TypeError) as exc:  # a setting librdkafka refused
                raise client_error(exc, self.options.secrets) from None  # no chained secrets

        consumer = POOL.acquire(key, self.rng.start, create)
        consumer.errors = self._errors  # a pooled consumer reports to its current reader
        self._delivered = self.rng.start
        self._key = key
        return consumer

    def _assign(self, offset: int) -> None:
        self._consumer.assign(offset)
        self._delivered = offset

    def _watermarks(self) -> tuple[int, int]:
        deadline = time.monotonic() + self.options.broker_timeout_ms / 1000
        while True:
            try:
                return self._consumer.watermarks(10)  # type: ignore[no-any-return]
            except Exception as exc:  # noqa: BLE001 - KafkaException while the broker is away
                self._errors.check()
                if time.monotonic() > deadline:
                    raise KafkaUnavailableError(
                        f"watermarks of {self.rng.topic}-{self.rng.partition} unavailable within "
                        f"brokerTimeoutMs={self.options.broker_timeout_ms}: {exc}") from exc
                time.sleep(1)

    def _loss(self, start: int, end: int, reason: str) -> None:
        enforce([Loss(self.rng.topic, self.rng.partition, reason, start, end)],
                "strict" if self.rng.strict else "window", "executor read")

    # -- reading -------------------------------------------------------------------------
    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the range's records as Arrow batches of bounded size, in offset order."""
        rng = self.rng
        if rng.end <= rng.start:
            return
        self._consumer = self._open()
        clean = False
        try:
            idle_since = time.monotonic()
            while self.next_offset < rng.end:
                want = min(self._chunk, rng.end - self.next_offset)
                fetch = self._consumer.consume(want, 1.0, rng.end, self.options.include_headers)
                self._errors.check()  # consume() served error_cb: a refused login fails now
                eof = None
                records = fetch.total > 0
                if records:
                    self._delivered = fetch.last + 1
                if fetch.events:
                    records, eof = self._handle_events(fetch.events, records)
                if records:
                    idle_since = time.monotonic()
                    batch = self._to_batch(fetch)
                    if batch is not None:
                        yield batch
                if eof is not None:
                    self._reached_eof(eof)
                if not records and self.next_offset < rng.end:
                    if self._position_reached():
                        break
                    if time.monotonic() - idle_since > self.options.poll_timeout_ms / 1000:
                        raise KafkaUnavailableError(
                            f"reading {rng.describe()}: no progress past offset "
                            f"{self.next_offset} for kafkaConsumer.pollTimeoutMs="
                            f"{self.options.poll_timeout_ms}; the broker may be down")
            clean = True
        finally:
            consumer, self._consumer = self._consumer, None
            if clean:
                POOL.release(self._key, consumer, self._delivered)
            else:
                POOL.discard(consumer)
            if self.records >= RELEASE_AFTER_RECORDS:  # else a worker holds what it freed
                release_freed_memory()
        if self.next_offset < rng.end:
            raise DataLossError(f"reading {rng.describe()}: stopped at offset "
                                f"{self.next_offset} before the planned end")

    def _position_reached(self) -> bool:
        """True when the consumer's fetch position passed the end without a record there
        (trailing transaction markers / aborted records / compacted keys)."""
        if self._consumer.position() >= self.rng.end and self._confirm_early_end():
            self.next_offset = self.rng.end
            self._delivered = -1  # control records: let the next reader seek
            return True
        return False

    def _confirm_early_end(self) -> bool:
        """Whether the position's claim that [next_offset, end) holds no record is believed.
        The first claim at an offset re-assigns the consumer there and says no, so the range
        is read again from a fresh fetch (a claim comes at most once per fetch); a second claim
        at the same offset is believed. Records the re-read delivers are read as usual (and
        logged)."""
        if self.next_offset >= self.rng.end or self._reread_at == self.next_offset:
            return True
        log.debug("orderedkafka: %s: position claims no record in [%d, %d); reading it again",
                  self.rng.describe(), self.next_offset, self.rng.end)
        self._reread_at = self.next_offset
        self._assign(self.next_offset)
        return False

    def _handle_events(self, events: list[tuple[Any, int]], records: bool,
                       ) -> tuple[bool, int | None]:
        """Handle EOF and out-of-range events; return whether the fetch's records count
        (not after an out-of-range reset) and the EOF offset."""
        eof: int | None = None
        for err, offset in events:
            if err.code() == PARTITION_EOF:
                eof = offset
                self._delivered = offset
            elif err.code() in (AUTO_OFFSET_RESET, OFFSET_OUT_OF_RANGE):
                low, high = self._watermarks()
                if self.next_offset < low:
                    jump = min(low, self.rng.end)
                    self._loss(self.next_offset, jump,
                               f"retention deleted unread records (log starts at {low})")
                    self.next_offset = jump
                elif self.next_offset > high:
                    self._loss(high, self.rng.end, "offsets went back (log truncated)")
                    self.next_offset = self.rng.end
                self._delivered = -1
                if self.next_offset < self.rng.end:
                    self._assign(self.next_offset)
                return False, None
            elif err.code() in (TRANSPORT, ALL_BROKERS_DOWN) or (
                    err.retriable() and not err.fatal()):
                log.warning("orderedkafka: %s: %s (retrying)", self.rng.describe(), err)
            else:
                raise kafka_exception(err)
        return records, eof

    def _reached_eof(self, eof: int) -> None:
        """The consumer reached the log end at ``eof`` having delivered everything before it."""
        if eof >= self.rng.end:
            self.next_offset = max(self.next_offset, self.rng.end)
            return
        low, high = self._watermarks()
        if high < self.rng.end:
            self._loss(max(high, self.next_offset), self.rng.end,
                       f"the log ends at {high} although {self.rng.end} was planned "
                       "(log truncated)")
            self.next_offset = self.rng.end

    def _to_batch(self, fetch: Fetch) -> pa.RecordBatch | None:
        """Arrow batch of the fetched records in [next_offset, end); checks order/gaps."""
        rng = self.rng
        first = fetch.first
        if first < self.next_offset or not fetch.increasing:
            raise DataLossError(f"reading {rng.describe()}: offsets not strictly increasing "
                                f"after {self.next_offset}: got {fetch.head}...")
        if first > self.next_offset and self.next_offset == rng.start:
            low, _ = self._watermarks()
            if low > self.next_offset:
                self._loss(self.next_offset, min(low, rng.end),
                           f"retention deleted unread records (log starts at {low})")
        if fetch.kept and self._reread_at == self.next_offset:
            log.warning("orderedkafka: %s: the consumer claimed no record in [%d, %d) "
                        "(position), but a fresh read delivers offset %d; reading on",
                        rng.describe(), self._reread_at, rng.end, first)
        if fetch.kept < fetch.total:  # delivered in order past the end: nothing left below it
            self.next_offset = rng.end
        else:
            self.next_offset = fetch.last + 1
        if not fetch.kept:
            return None
        batch = fetch.batch(self.schema, rng.topic, rng.partition)
        self.records += fetch.kept
        if batch.nbytes > self.options.arrow_batch_max_bytes and self._chunk > 1:
            self._chunk = max(1, int(self._chunk * self.options.arrow_batch_max_bytes
                                     / batch.nbytes))
        return batch


def read_range(rng: OffsetRange, options: OrderedKafkaOptions) -> Iterator[pa.RecordBatch]:
    """Executor entry point: the Arrow batches of one range, in offset order.

    Parameters
    ----------
    rng
        The range to read.
    options
        The source's parsed options, secrets included.

    Returns
    -------
    Iterator[pyarrow.RecordBatch]
        Batches of bounded size with the :func:`arrow_schema` columns.

    Raises
    ------
    DataLossError
        A strict range lost records, its offsets went back, or the read stopped before the
        planned end.
    KafkaUnavailableError
        The broker stayed unreachable past ``brokerTimeoutMs`` or ``kafkaConsumer.pollTimeoutMs``.
    OptionError
        ``reader = native`` without the extension, or secrets dropped and not restored.
    confluent_kafka.KafkaException
        Kafka reported an error that is not retriable.

    Runs on
    -------
    executor"""
    yield from RangeReader(rng, options).batches()
