"""``spark.read.format("rocksstate")`` over the ordered stage's state.

The stage publishes each Kafka partition's state version in the batch commits of its output
table, not in the store's ``versions/`` index, so the plain reader cannot find them; with
option ``table`` this reader resolves them through the table's batch log. Options and
columns: :class:`OrderedRockStateDataSource`.
"""

from __future__ import annotations

import datetime
import json
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from orderedstream.core.errors import InvariantError, OptionError, StateNotFoundError
from orderedstream.core.worker_errors import reason_first_in_worker
from orderedstream.statestore import ttl as ttl_mod
from orderedstream.statestore.base import EMPTY_VERSION
from orderedstream.statestore.ordered.keyed_state import STATE_SPACE, decode_key
from orderedstream.statestore.ordered.options import OrderedOptions
from orderedstream.statestore.ordered.plan import (
    PartitionBase,
    bases_from_extra,
    split_partition_id,
)
from orderedstream.statestore.ordered.state_access import open_store
from orderedstream.statestore.reader import BATCH_ROWS, RockStateDataSource, RockStateReadOptions

ORDERED_SCHEMA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
    pa.field("batch_id", pa.int64()), pa.field("version", pa.int64()),
    pa.field("space", pa.string()), pa.field("key", pa.binary()),
    pa.field("key_str", pa.string()), pa.field("value", pa.string()),
    pa.field("expires_at_ms", pa.int64()), pa.field("timeout_ms", pa.int64())])

#: Options of the plain reader that mean nothing with ``table`` (refused, not ignored).
_PLAIN_ONLY = {"version": "batchId (the batch whose commit names each partition's version)",
               "space": f"nothing: the ordered stage's state is the space {STATE_SPACE!r}"}


def json_text(value: Any) -> str:
    """JSON text of a state value or key, as ``orderedstream state get`` prints it.

    Parameters
    ----------
    value
        A decoded value or key: bytes become UTF-8 (invalid bytes escaped), dates ISO text,
        anything JSON cannot hold its ``repr``.

    Returns
    -------
    str
        Key-sorted JSON.

    Runs on
    -------
    both"""
    def default(obj: Any) -> Any:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj).decode("utf-8", "backslashreplace")
        if isinstance(obj, (datetime.datetime, datetime.date)):
            return obj.isoformat()
        return repr(obj)
    return json.dumps(value, default=default, sort_keys=True)


def key_columns(key: Any) -> tuple[bytes | None, str | None]:
    """The ``key`` and ``key_str`` columns of a decoded grouping key.

    Parameters
    ----------
    key
        The key as the user function got it.

    Returns
    -------
    tuple[bytes | None, str | None]
        bytes: the bytes and their UTF-8 text (None when not UTF-8); str: its UTF-8 and itself;
        else no bytes and JSON text (None for a None key).

    Runs on
    -------
    executor"""
    if isinstance(key, bytes):
        try:
            return key, key.decode()
        except UnicodeDecodeError:
            return key, None
    if isinstance(key, str):
        return key.encode(), key
    return None, (None if key is None else json_text(key))


@dataclass(frozen=True, kw_only=True)
class OrderedReadOptions:
    """The ``rocksstate`` options when ``table`` is given, parsed once (driver)."""

    table: str
    state: OrderedOptions
    batch_id: int | None = None
    topic: str | None = None
    partition: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> OrderedReadOptions:
        """Parse the reader's Spark options when ``table`` is given.

        Parameters
        ----------
        options
            The options of ``spark.read.format("rocksstate")``.

        Returns
        -------
        OrderedReadOptions
            The table, the state's options (local copies under the temp dir unless
            ``local_dir``), ``batchId``, ``topic`` and ``partition``.

        Raises
        ------
        OptionError
            What the plain reader refuses; ``version`` or ``space`` given; ``batchId`` not an
            integer >= 0.

        Runs on
        -------
        driver"""
        plain = RockStateReadOptions.parse(options)  # location, storage_options, partition
        opts = plain.raw
        for name, instead in _PLAIN_ONLY.items():
            if opts.get(name) not in (None, ""):
                raise OptionError(f"rocksstate option {name}={opts[name]!r} does not apply "
                                  f"with option 'table' (the ordered stage's state); use "
                                  f"{instead}")
        batch: int | None = None
        if opts.get("batchid") not in (None, ""):
            try:
                batch = int(opts["batchid"])
            except ValueError:
                batch = -1
            if batch < 0:
                raise OptionError(f"rocksstate option batchId={opts['batchid']!r}: a committed "
                                  "batch id (integer >= 0) is required; omit it for the latest")
        parsed = plain.store_options
        store = {f.name: getattr(parsed, f.name) for f in fields(parsed)
                 if f.name.lower() in opts and f.name != "space_codecs"}
        store.setdefault("local_dir", tempfile.gettempdir())
        storage = dict(plain.location.storage_options)
        state = OrderedOptions(
            state_location=plain.location.url.rstrip("/"), output=opts["table"],
            output_schema=pa.schema([("row", pa.null())]), storage_options=storage,
            store_options=store, placement="off")
        return cls(table=opts["table"], state=state, batch_id=batch,
                   topic=opts.get("topic") or None, partition=plain.partition)


@dataclass(frozen=True)
class _OrderedSplit(InputPartition):
    topic: str
    partition: int
    batch_id: int
    base: PartitionBase


class OrderedStateReader(DataSourceReader):
    """``partitions`` runs on the driver (reads one commit record, checks each manifest);
    ``read`` on executors, one Kafka partition each (picklable: options and splits only)."""

    def __init__(self, options: OrderedReadOptions) -> None:
        self.options = options

    def _record(self) -> Any:
        from orderedstream.sinks import open_batch_log

        opts = self.options
        log = open_batch_log(opts.table, opts.state.storage_options)
        record = (log.latest_batch_record() if opts.batch_id is None
                  else log.get(opts.batch_id))
        if record is None:
            latest = log.latest()
            if opts.batch_id is None or latest is None:
                raise StateNotFoundError(f"rocksstate: the table {opts.table} has no committed "
                                         "batch yet: no state to read")
            raise StateNotFoundError(
                f"rocksstate: batch {opts.batch_id} is not committed at {opts.table} (latest "
                f"committed batch: {latest}); pass a committed batchId or omit it")
        return record

    @reason_first_in_worker
    def partitions(self) -> list[InputPartition]:
        """One input partition per Kafka partition with state as of the batch (filtered by
        ``topic`` and ``partition``), each checked to still be at the state location.

        Returns
        -------
        list[InputPartition]
            The splits, by topic and partition number.

        Raises
        ------
        StateNotFoundError
            No batch committed, the batch not committed, no ordered-stage state in it, none for
            the filter (the partitions it has are listed), or a version gone (a wrong ``path``,
            or retention deleted it).

        Runs on
        -------
        driver"""
        opts = self.options
        record = self._record()
        batch_id = int(record.batch_id)
        bases = bases_from_extra(record.extra)
        if not bases:
            raise StateNotFoundError(
                f"rocksstate: batch {batch_id} of {opts.table} names no ordered-stage state: "
                "is it the output table of an OrderedStateful query?")
        splits: list[InputPartition] = []
        for pid, base in sorted(bases.items(), key=lambda kv: split_partition_id(kv[0])):
            topic, number = split_partition_id(pid)
            if opts.topic not in (None, topic) or opts.partition not in (None, number):
                continue
            self._check_kept(pid, batch_id, base)
            splits.append(_OrderedSplit(topic, number, batch_id, base))
        if not splits:
            raise StateNotFoundError(
                f"rocksstate: batch {batch_id} of {opts.table} has no state for topic="
                f"{opts.topic or '*'} partition="
                f"{'*' if opts.partition is None else opts.partition}; it has: "
                f"{', '.join(sorted(bases))}")
        return splits

    def _check_kept(self, pid: str, batch_id: int, base: PartitionBase) -> None:
        """Driver: the version's manifest must still be there (retention deletes the state of
        batches older than its last ``keep_batches``; a wrong ``path`` finds none)."""
        if base.version == EMPTY_VERSION or base.manifest is None:
            return
        topic, number = split_partition_id(pid)
        store = open_store(self.options.state, topic, {(number, base.version): base.manifest})
        fs, root = store.filesystem()
        if not fs.exists(f"{root}/{base.manifest}"):
            raise StateNotFoundError(
                f"rocksstate: the state of Kafka {pid} as of batch {batch_id} of "
                f"{self.options.table} (version {base.version}) is not at "
                f"{store.location.url}/{base.manifest}: either option 'path' is not this "
                "query's state location, or retention deleted that version (only the last "
                "keep_batches batches keep their state); read a later batchId")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Open one planned version read-only (a private temp copy) and stream its keys.

        Parameters
        ----------
        partition
            One of the partitions :meth:`partitions` planned.

        Returns
        -------
        Iterator[pa.RecordBatch]
            Rows of ``ORDERED_SCHEMA`` in batches of ``BATCH_ROWS``.

        Raises
        ------
        InvariantError
            ``partition`` is not one this reader planned.
        CorruptStateError
            The version's files are missing or damaged.

        Runs on
        -------
        executor"""
        if not isinstance(partition, _OrderedSplit):
            raise InvariantError(f"rocksstate reader got a {type(partition).__name__} to read, "
                                 "not one of the partitions it planned")
        base = partition.base
        if base.version == EMPTY_VERSION or base.manifest is None:
            return
        store = open_store(self.options.state, partition.topic,
                           {(partition.partition, base.version): base.manifest})
        head = {"topic": partition.topic, "partition": partition.partition,
                "batch_id": partition.batch_id, "version": base.version, "space": STATE_SPACE}
        with store.open_read_only(partition.partition, base.version) as part:
            rows: list[dict[str, Any]] = []
            for stored_key, raw in part.raw_items(space=STATE_SPACE):
                payload, expires = ttl_mod.unframe(raw)
                value, timeout = part.decode(STATE_SPACE, payload)
                key, key_str = key_columns(decode_key(stored_key))
                rows.append({**head, "key": key, "key_str": key_str, "value": json_text(value),
                             "expires_at_ms": expires, "timeout_ms": timeout})
                if len(rows) >= BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, schema=ORDERED_SCHEMA)
                    rows = []
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=ORDERED_SCHEMA)


class OrderedRockStateDataSource(RockStateDataSource):
    """``rocksstate``: with option ``table``, the ordered stage's state as of a committed batch
    of that output table; without it, the plain reader (``RockStateDataSource``)::

        spark.read.format("rocksstate")
            .option("path", "s3://bucket/state/job")     # OrderedStateful(state_location=...)
            .option("table", "s3://bucket/out/job")      # OrderedStateful(output=...)
            .option("storage_options", '{"client_kwargs": {"endpoint_url": "http://..."}}')
            .option("batchId", 41)                       # optional; default: the latest batch
            .load()

    Other options: ``topic`` and ``partition`` (default all) and any ``StateStoreOptions``
    field. Columns: ``topic``, ``partition``, ``batch_id`` (the batch whose commit named the
    version), ``version``, ``space``, ``key`` (the grouping key's bytes when it is bytes or
    str, else null), ``key_str`` (UTF-8 of bytes, the str, else JSON), ``value`` (JSON text
    of the state), ``expires_at_ms`` and ``timeout_ms``. One Spark partition per Kafka
    partition, streamed in bounded batches whatever the key count."""

    def _ordered(self) -> bool:
        return any(k.lower() == "table" and v for k, v in self.options.items())

    @reason_first_in_worker
    def schema(self) -> StructType:
        """The DataFrame's schema: ``ORDERED_SCHEMA`` with ``table``, else the plain reader's.

        Returns
        -------
        StructType
            The columns.

        Raises
        ------
        OptionError
            The options do not parse (checked here so that ``load()`` fails, reason first).

        Runs on
        -------
        driver"""
        if not self._ordered():
            return super().schema()
        from pyspark.sql.pandas.types import from_arrow_schema

        OrderedReadOptions.parse(self.options)  # a bad option fails load(), reason first
        return from_arrow_schema(ORDERED_SCHEMA)

    @reason_first_in_worker
    def reader(self, schema: StructType) -> DataSourceReader:
        """The reader Spark plans partitions with: :class:`OrderedStateReader` with ``table``,
        else the plain reader's.

        Parameters
        ----------
        schema
            The schema Spark resolved from :meth:`schema`.

        Returns
        -------
        DataSourceReader
            The reader.

        Raises
        ------
        OptionError
            The options do not parse.

        Runs on
        -------
        driver"""
        if not self._ordered():
            return super().reader(schema)
        return OrderedStateReader(OrderedReadOptions.parse(self.options))


__all__ = ["ORDERED_SCHEMA", "OrderedReadOptions", "OrderedRockStateDataSource",
           "OrderedStateReader", "json_text", "key_columns"]
