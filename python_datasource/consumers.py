"""The two Kafka consumers a range reader can drive, behind one small interface.

``NativeConsumer`` (``orderedstream._kafka_native``: Rust, the GIL released, Arrow buffers per
fetch) and ``PythonConsumer`` (confluent-kafka, the fallback) each return a :class:`Fetch` per
consume call to ``reader.RangeReader``, which keeps every decision; both raise confluent-kafka's
``KafkaException``. Runs on the executors (``resolve`` on the driver too).
"""

from __future__ import annotations

import bisect
import logging
from typing import Any, Literal

import pyarrow as pa

from orderedstream.python_datasource.client_config import ClientErrors, Settings

log = logging.getLogger(__name__)

ReaderKind = Literal["native", "python", "auto"]

# librdkafka error codes the reader tells apart (confluent_kafka.KafkaError's constants).
PARTITION_EOF = -191
AUTO_OFFSET_RESET = -140
OFFSET_OUT_OF_RANGE = 1
TRANSPORT = -195
ALL_BROKERS_DOWN = -187

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_TIMESTAMP = pa.timestamp("us", "UTC")

_native: Any = None
_native_error: str | None = None
_fallback_logged = False


def native_module() -> Any:
    """``orderedstream._kafka_native``, or None when it is not built (the reason is kept)."""
    global _native, _native_error
    if _native is None and _native_error is None:
        try:
            from orderedstream import _kafka_native  # type: ignore[attr-defined]

            _native = _kafka_native
        except ImportError as exc:
            _native_error = str(exc)
    return _native


def native_unavailable_reason() -> str | None:
    """Why the native reader cannot load (None when it can)."""
    native_module()
    return _native_error


def resolve(kind: ReaderKind) -> Literal["native", "python"]:
    """The reader ``kind`` stands for here: ``auto`` is native when the extension loads, else
    python (a warning once); ``native`` that does not load is an ``OptionError`` saying why.

    Parameters
    ----------
    kind
        The ``reader`` option: ``native``, ``python`` or ``auto``.
    """
    global _fallback_logged
    if kind == "python":
        return "python"
    if native_module() is not None:
        return "native"
    if kind == "native":
        from orderedstream.core.errors import OptionError

        raise OptionError(f"option 'reader' = 'native' needs the extension "
                          f"orderedstream._kafka_native, which does not load here "
                          f"({_native_error}); build it with scripts/bootstrap.sh (Rust "
                          "toolchain: cargo) or use reader 'auto' or 'python'")
    if not _fallback_logged:
        _fallback_logged = True
        log.warning("orderedkafka: the native Kafka reader is not built (%s); reading with "
                    "confluent-kafka (slower)", _native_error)
    return "python"


class NativeError:
    """A librdkafka error as the native reader reports it, with the methods of
    ``confluent_kafka.KafkaError`` that the reader and :class:`ClientErrors` use."""

    __slots__ = ("_code", "_reason")

    def __init__(self, code: int, reason: str) -> None:
        self._code, self._reason = code, reason

    def code(self) -> int:
        """The librdkafka error code."""
        return self._code

    def name(self) -> str:
        """librdkafka's name of the code (e.g. ``_PARTITION_EOF``)."""
        return str(native_module().err_name(self._code))

    def retriable(self) -> bool:
        """False, as confluent-kafka's ``KafkaError`` of an event."""
        return False  # as confluent-kafka's KafkaError of a message or error_cb event

    def fatal(self) -> bool:
        """False, as confluent-kafka's ``KafkaError`` of an event."""
        return False

    def __str__(self) -> str:
        return f'KafkaError{{code={self.name()},val={self._code},str="{self._reason}"}}'

    def str(self) -> str:  # noqa: A003 - confluent-kafka's name
        """librdkafka's text of the error."""
        return self._reason


def kafka_exception(err: Any) -> Exception:
    """confluent-kafka's ``KafkaException`` for ``err`` (what both readers raise).

    Parameters
    ----------
    err
        A ``NativeError`` or a confluent-kafka ``KafkaError``.
    """
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(err, NativeError):
        err = KafkaError(err.code(), err.str())
    return KafkaException(err)


class Fetch:
    """What one consume call returned: the record count, first/last offsets and whether they
    ascend, the events (``KafkaError``, offset), and the records before the range end."""

    __slots__ = ("total", "first", "last", "increasing", "head", "kept", "events", "_build")

    def __init__(self, *, total: int, first: int, last: int, increasing: bool, head: list[int],
                 kept: int, events: list[tuple[Any, int]], build: Any) -> None:
        self.total, self.first, self.last = total, first, last
        self.increasing, self.head, self.kept = increasing, head, kept
        self.events = events
        self._build = build

    def batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        """The kept records (offsets below the range end) as an Arrow batch.

        Parameters
        ----------
        schema, topic, partition
            The source's record schema, and the topic and partition columns' values.
        """
        return self._build(schema, topic, partition)


class PythonConsumer:
    """confluent-kafka's Consumer for one partition (the fallback reader)."""

    kind = "python"

    def __init__(self, settings: Settings, topic: str, partition: int,
                 errors: ClientErrors) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        self.topic, self.partition, self.errors = topic, partition, errors
        self._tp = TopicPartition(topic, partition)
        try:
            self._consumer: Any = Consumer(settings, error_cb=self._on_error)
        except (KafkaException, ValueError, TypeError) as exc:  # a refused setting
            raise ValueError(str(exc)) from None

    def _on_error(self, err: Any) -> None:
        self.errors(err)

    def assign(self, offset: int) -> None:
        """Assign the partition so that ``offset`` is delivered next.

        Parameters
        ----------
        offset
            The offset to start at.
        """
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(self.topic, self.partition, offset)])

    def unassign(self) -> None:
        """Stops fetching (an idle pooled consumer asks the broker nothing)."""
        self._consumer.unassign()

    def cached_high(self) -> int:
        """The log end the last fetch response reported (no request; < 0: not known)."""
        return int(self._consumer.get_watermark_offsets(self._tp, cached=True)[1])

    def assigned(self) -> bool:
        """Whether the partition is assigned (fetched from) now."""
        return bool(self._consumer.assignment())

    def watermarks(self, timeout_s: float) -> tuple[int, int]:
        """The partition's (low, high) watermarks, asked of the broker.

        Parameters
        ----------
        timeout_s
            Seconds to wait for the answer (``KafkaException`` after them).
        """
        low, high = self._consumer.get_watermark_offsets(self._tp, timeout=timeout_s,
                                                         cached=False)
        return int(low), int(high)

    def position(self) -> int:
        """The offset delivered next (-1 when not known)."""
        pos = self._consumer.position([self._tp])
        return pos[0].offset if pos else -1

    def consume(self, want: int, timeout_s: float, end: int, headers: bool) -> Fetch:
        """Fetch up to ``want`` records or events, waiting at most ``timeout_s``.

        Parameters
        ----------
        want, timeout_s
            How many messages to ask librdkafka for, and the seconds to wait for the first.
        end
            The range's end offset (exclusive): records from it on are counted, not kept.
        headers
            Whether the batch gets the headers column.
        """
        msgs: list[Any] = self._consumer.consume(num_messages=want, timeout=timeout_s)
        records: list[Any] = []
        events: list[tuple[Any, int]] = []
        for m in msgs:
            err = m.error()
            if err is None:
                records.append(m)
            else:
                events.append((err, m.offset()))
        offsets: list[int] = [m.offset() for m in records]
        increasing = all(b > a for a, b in zip(offsets, offsets[1:]))
        cut = bisect.bisect_left(offsets, end) if increasing else 0
        kept = records[:cut]

        def build(schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
            return _python_batch(kept, offsets[:cut], schema, topic, partition, headers)

        return Fetch(total=len(records), first=offsets[0] if offsets else -1,
                     last=offsets[-1] if offsets else -1, increasing=increasing,
                     head=offsets[:5], kept=cut, events=events, build=build)

    def close(self) -> None:
        """Close the consumer (its broker connections)."""
        self._consumer.close()


def _python_batch(msgs: list[Any], offsets: list[int], schema: pa.Schema, topic: str,
                  partition: int, headers: bool) -> pa.RecordBatch:
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    columns = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array([s[1] * 1000 for s in stamps], pa.int64()).cast(_TIMESTAMP),
        pa.array([s[0] - 1 for s in stamps], pa.int32()),
    ]
    if headers:
        columns.append(_python_headers([m.headers() for m in msgs]))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _python_headers(values: list[list[tuple[str, bytes]] | None]) -> pa.Array:
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


class NativeConsumer:
    """``orderedstream._kafka_native.Consumer`` for one partition: Arrow buffers per fetch."""

    kind = "native"

    def __init__(self, settings: Settings, topic: str, partition: int,
                 errors: ClientErrors) -> None:
        self.topic, self.partition, self.errors = topic, partition, errors
        pairs = [(k, _setting(v)) for k, v in settings.items()]
        try:
            self._consumer = native_module().Consumer(pairs)
        except ValueError as exc:  # librdkafka refused a setting: as confluent-kafka says it
            raise ValueError(str(NativeError(-186, str(exc)))) from None  # _INVALID_ARG
        self._eof_bump: int | None = None  # an end-of-log offset librdkafka took +1 of

    def _drain_errors(self) -> None:
        for code, reason in self._consumer.take_errors():
            self.errors(NativeError(code, reason))

    def assign(self, offset: int) -> None:
        """Assign the partition so that ``offset`` is delivered next.

        Parameters
        ----------
        offset
            The offset to start at (``KafkaException`` when librdkafka refuses).
        """
        _raise_on(self._consumer.assign(self.topic, self.partition, offset), "assign")
        self._eof_bump = None

    def unassign(self) -> None:
        """Stops fetching (an idle pooled consumer asks the broker nothing)."""
        _raise_on(self._consumer.unassign(), "unassign")
        self._eof_bump = None

    def cached_high(self) -> int:
        """The log end the last fetch response reported (no request; < 0: not known)."""
        code, _, high = self._consumer.cached_watermarks(self.topic, self.partition)
        return -1 if code else int(high)

    def assigned(self) -> bool:
        """Whether the partition is assigned (fetched from) now."""
        return bool(self._consumer.assigned_count())

    def watermarks(self, timeout_s: float) -> tuple[int, int]:
        """The partition's (low, high) watermarks, asked of the broker.

        Parameters
        ----------
        timeout_s
            Seconds to wait for the answer (``KafkaException`` after them).
        """
        code, text, low, high = self._consumer.watermarks(self.topic, self.partition,
                                                          int(timeout_s * 1000))
        self._drain_errors()
        if code:
            raise kafka_exception(NativeError(code, text))
        return low, high

    def position(self) -> int:
        """The offset delivered next. librdkafka's batch consume moves its position to an EOF
        event's offset + 1 (one past a record not delivered yet); undone while nothing moved it."""
        code, offset = self._consumer.position(self.topic, self.partition)
        _raise_on(code, "position")
        if self._eof_bump is not None and offset == self._eof_bump + 1:
            return self._eof_bump
        return int(offset)

    def consume(self, want: int, timeout_s: float, end: int, headers: bool) -> Fetch:
        """Fetch as :meth:`PythonConsumer.consume` does, with the GIL released.

        Parameters
        ----------
        want, timeout_s, end, headers
            As :meth:`PythonConsumer.consume`.
        """
        total, kept, first, last, increasing, head, raw_events, buffers = \
            self._consumer.consume(want, int(timeout_s * 1000), end, headers)
        self._drain_errors()
        events = [(NativeError(code, text), offset) for code, offset, text in raw_events]
        eofs = [offset for code, offset, _ in raw_events if code == PARTITION_EOF]
        if eofs and max(eofs) + 1 > (last + 1 if total else -1):
            self._eof_bump = max(eofs)  # the position librdkafka now reports is one past it
        elif total or raw_events:
            self._eof_bump = None

        def build(schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
            return _native_batch(kept, buffers, schema, topic, partition, headers)

        return Fetch(total=total, first=first, last=last, increasing=increasing, head=head,
                     kept=kept, events=events, build=build)

    def close(self) -> None:
        """Close the consumer (its broker connections)."""
        self._consumer.close()


def _setting(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _raise_on(code: int, what: str) -> None:
    if code:
        name = native_module().err_name(code)
        raise kafka_exception(NativeError(code, f"{what} failed ({name})"))


def _binary(kind: pa.DataType, n: int, parts: tuple[Any, ...]) -> pa.Array:
    validity, offsets, data, nulls = parts
    return pa.Array.from_buffers(kind, n, [pa.py_buffer(validity) if validity else None,
                                           pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _native_batch(n: int, buffers: tuple[Any, ...], schema: pa.Schema, topic: str,
                  partition: int, headers: bool) -> pa.RecordBatch:
    key, value, offsets, stamps, stamp_types, hdrs = buffers
    columns = [
        _binary(pa.binary(), n, key),
        _binary(pa.binary(), n, value),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(stamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(stamp_types)]),
    ]
    if headers:
        validity, list_offsets, nulls, names, values = hdrs
        count = (len(list_offsets) // 4) - 1
        items = len(names[1]) // 4 - 1
        struct = pa.StructArray.from_arrays(
            [_binary(pa.string(), items, names), _binary(pa.binary(), items, values)],
            fields=list(HEADER_TYPE.value_type))
        columns.append(pa.Array.from_buffers(
            HEADER_TYPE, count, [pa.py_buffer(validity) if validity else None,
                                 pa.py_buffer(list_offsets)], null_count=nulls,
            children=[struct]))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def open_consumer(kind: Literal["native", "python"], settings: Settings, topic: str,
                  partition: int, errors: ClientErrors) -> PythonConsumer | NativeConsumer:
    """A new, unassigned consumer of ``kind`` for one partition (``ValueError``: a bad setting).

    Parameters
    ----------
    kind
        ``native`` or ``python`` (see :func:`resolve`).
    settings
        The consumer's librdkafka settings (``client_config.consumer_settings``).
    topic, partition
        The partition to read.
    errors
        Receives the errors librdkafka reports through ``error_cb``.
    """
    cls = NativeConsumer if kind == "native" else PythonConsumer
    return cls(settings, topic, partition, errors)
