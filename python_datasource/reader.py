"""Executor side: read one offset range with one confluent_kafka Consumer, as Arrow batches.

Runs inside Spark's Python worker on an executor. One consumer per task: assign + seek to the
range start, consume in chunks, build ``pyarrow.RecordBatch``es column-wise (no Python row
objects), and stop exactly at the range end. Checks on the way: offsets strictly increase, a
jump past the start is loss only when the log start moved past it (otherwise it is a
transaction marker, an aborted record or a compacted key), and the consumer's position must
reach the planned end. The consumer is always closed.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from orderedstream.core.errors import DataLossError, KafkaUnavailableError
from orderedstream.python_datasource.client_config import (
    ClientErrors,
    Settings,
    client_error,
    consumer_settings,
)
from orderedstream.python_datasource.options import OrderedKafkaOptions
from orderedstream.python_datasource.planning import Loss, OffsetRange, enforce

log = logging.getLogger(__name__)

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Arrow schema equal to Spark's ``to_arrow_schema`` of the source's declared schema."""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", "UTC")),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def consumer_config(options: OrderedKafkaOptions) -> Settings:
    """Settings of an executor's consumer for ``options`` (``client_config.consumer_settings``:
    no group management, no auto commit, no silent offset reset)."""
    return consumer_settings(options.client_config(), options.group_id)


class RangeReader:
    """Reads one :class:`OffsetRange`; iterate :meth:`batches` once."""

    def __init__(self, rng: OffsetRange, options: OrderedKafkaOptions) -> None:
        self.rng = rng
        self.options = options
        self.schema = arrow_schema(options.include_headers)
        self.next_offset = rng.start  # every offset below this was delivered or skipped legally
        self.records = 0
        self._consumer: Any = None
        self._chunk = max(1, options.arrow_batch_max_records)
        self._errors = ClientErrors(f"reading {rng.describe()}", options.secrets)

    # -- consumer ------------------------------------------------------------------------
    def _open(self) -> Any:
        from confluent_kafka import Consumer, KafkaException

        settings = consumer_config(self.options)  # OptionError when secrets were dropped
        try:
            consumer = Consumer(settings, error_cb=self._errors)
        except (KafkaException, ValueError, TypeError) as exc:
            raise client_error(exc, self.options.secrets) from None  # no chained secrets
        self._assign(consumer, self.rng.start)
        return consumer

    def _assign(self, consumer: Any, offset: int) -> None:
        from confluent_kafka import TopicPartition

        consumer.assign([TopicPartition(self.rng.topic, self.rng.partition, offset)])

    def _watermarks(self) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        tp = TopicPartition(self.rng.topic, self.rng.partition)
        deadline = time.monotonic() + self.options.broker_timeout_ms / 1000
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                return int(low), int(high)
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
        try:
            idle_since = time.monotonic()
            while self.next_offset < rng.end:
                want = min(self._chunk, rng.end - self.next_offset)
                msgs = self._consumer.consume(num_messages=want, timeout=1.0)
                self._errors.check()  # consume() served error_cb: a refused login fails now
                eof = None
                if msgs:
                    errors = [m.error() for m in msgs]
                    if any(errors):
                        msgs, eof = self._handle_events(msgs, errors)
                if msgs:
                    idle_since = time.monotonic()
                    batch = self._to_batch(msgs)
                    if batch is not None:
                        yield batch
                if eof is not None:
                    self._reached_eof(eof)
                if not msgs and self.next_offset < rng.end:
                    if self._position_reached():
                        break
                    if time.monotonic() - idle_since > self.options.poll_timeout_ms / 1000:
                        raise KafkaUnavailableError(
                            f"reading {rng.describe()}: no progress past offset "
                            f"{self.next_offset} for kafkaConsumer.pollTimeoutMs="
                            f"{self.options.poll_timeout_ms}; the broker may be down")
        finally:
            consumer, self._consumer = self._consumer, None
            consumer.close()
        if self.next_offset < rng.end:
            raise DataLossError(f"reading {rng.describe()}: stopped at offset "
                                f"{self.next_offset} before the planned end")

    def _position_reached(self) -> bool:
        """True when the consumer's fetch position passed the end without a record there
        (trailing transaction markers / aborted records / compacted keys)."""
        from confluent_kafka import TopicPartition

        pos = self._consumer.position([TopicPartition(self.rng.topic, self.rng.partition)])
        offset = pos[0].offset if pos else -1
        if offset >= self.rng.end:
            self.next_offset = self.rng.end
            return True
        return False

    def _handle_events(self, msgs: list[Any], errors: list[Any]) -> tuple[list[Any], int | None]:
        """Split off EOF and out-of-range events; return the real records and the EOF offset."""
        from confluent_kafka import KafkaError, KafkaException

        records = []
        eof: int | None = None
        for msg, err in zip(msgs, errors):
            if err is None:
                records.append(msg)
            elif err.code() == KafkaError._PARTITION_EOF:
                eof = msg.offset()
            elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                low, high = self._watermarks()
                if self.next_offset < low:
                    jump = min(low, self.rng.end)
                    self._loss(self.next_offset, jump,
                               f"retention deleted unread records (log starts at {low})")
                    self.next_offset = jump
                elif self.next_offset > high:
                    self._loss(high, self.rng.end, "offsets went back (log truncated)")
                    self.next_offset = self.rng.end
                if self.next_offset < self.rng.end:
                    self._assign(self._consumer, self.next_offset)
                return [], None
            elif err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN) or (
                    err.retriable() and not err.fatal()):
                log.warning("orderedkafka: %s: %s (retrying)", self.rng.describe(), err)
            else:
                raise KafkaException(err)
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

    def _to_batch(self, msgs: list[Any]) -> pa.RecordBatch | None:
        """Column-wise Arrow batch of the records in [next_offset, end); checks order/gaps."""
        rng = self.rng
        offsets = [m.offset() for m in msgs]
        first = offsets[0]
        if first < self.next_offset or any(b <= a for a, b in zip(offsets, offsets[1:])):
            raise DataLossError(f"reading {rng.describe()}: offsets not strictly increasing "
                                f"after {self.next_offset}: got {offsets[:5]}...")
        if first > self.next_offset and self.next_offset == rng.start:
            low, _ = self._watermarks()
            if low > self.next_offset:
                self._loss(self.next_offset, min(low, rng.end),
                           f"retention deleted unread records (log starts at {low})")
        cut = bisect.bisect_left(offsets, rng.end)
        if cut < len(offsets):
            msgs, offsets = msgs[:cut], offsets[:cut]
            self.next_offset = rng.end
        else:
            self.next_offset = offsets[-1] + 1
        if not msgs:
            return None
        n = len(msgs)
        stamps = [m.timestamp() for m in msgs]
        columns = [
            pa.array([m.key() for m in msgs], pa.binary()),
            pa.array([m.value() for m in msgs], pa.binary()),
            pa.array([rng.topic] * n, pa.string()),
            pa.array([rng.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([s[1] * 1000 for s in stamps], pa.int64()).cast(pa.timestamp("us", "UTC")),
            pa.array([s[0] - 1 for s in stamps], pa.int32()),
        ]
        if self.options.include_headers:
            columns.append(_headers([m.headers() for m in msgs]))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self.records += n
        if batch.nbytes > self.options.arrow_batch_max_bytes and self._chunk > 1:
            self._chunk = max(1, int(self._chunk * self.options.arrow_batch_max_bytes
                                     / batch.nbytes))
        return batch


def _headers(values: list[list[tuple[str, bytes]] | None]) -> pa.Array:
    """headers column: list<struct<key string, value binary>>, null when a record has none."""
    offsets = [0]
    keys: list[str] = []
    vals: list[bytes | None] = []
    mask = []
    for hs in values:
        if hs:
            for k, v in hs:
                keys.append(k)
                vals.append(v)
        offsets.append(len(keys))
        mask.append(not hs)
    items = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(vals, pa.binary())],
                                       fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items,
                                    type=HEADER_TYPE, mask=pa.array(mask, pa.bool_()))


def read_range(rng: OffsetRange, options: OrderedKafkaOptions) -> Iterator[pa.RecordBatch]:
    """Executor entry point: the Arrow batches of one range."""
    yield from RangeReader(rng, options).batches()
