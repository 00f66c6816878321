"""The ordered stage's task body (executor side): Kafka partitions in offset order, with state,
in memory bounded by ``max_cached_keys`` decoded entries and ``output_batch_rows`` rows."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from orderedstream.core.errors import USER_FUNCTION_NOTE, OptionError, OrderViolationError
from orderedstream.core.pandaslazy import keep_pandas_lazy
from orderedstream.python_datasource.client_config import KafkaSecrets
from orderedstream.python_datasource.ranges import described, is_range_columns
from orderedstream.python_datasource.reader import read_range
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.writer import task_attempt_id, write_parquet_files
from orderedstream.statestore.base import EMPTY_VERSION
from orderedstream.statestore.ordered.group_state import GroupState
from orderedstream.statestore.ordered.inflight import (
    exclusive,
    in_order,
    light_range,
    partitions_in_flight,
)
from orderedstream.statestore.ordered.keyed_state import STATE_SPACE, KeyedStateTable, decode_key
from orderedstream.statestore.ordered.options import OrderedOptions
from orderedstream.statestore.ordered.placement import (
    executor_id,
    spark_executor_id,
    spark_partition_index,
)
from orderedstream.statestore.ordered.plan import (
    BatchPlan,
    PartitionBase,
    PartitionCommit,
    partition_id,
    split_partition_id,
)
from orderedstream.statestore.ordered.records import RecordDecoder
from orderedstream.statestore.ordered.rows import as_rows, refuse, short_repr, to_batch
from orderedstream.statestore.ordered.state_access import open_partition
from orderedstream.statestore.ordered.timeouts import EventTimeTimeout, ProcessingTimeTimeout

UserFunction = Callable[[Any, Any, GroupState], Iterable[Any] | None]
COMMIT_SCHEMA = pa.schema([pa.field("commit", pa.string())])


def _event_ms(column: pa.Array) -> int | None:
    """Largest event time in ``column`` as epoch milliseconds (timestamps or int64 ms)."""
    if len(column) == column.null_count:
        return None
    typ = column.type
    if pa.types.is_timestamp(typ):
        value = pc.max(column.cast(pa.int64())).as_py()
        divisor = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[typ.unit]
        return int(value // divisor) if typ.unit != "s" else int(value * 1000)
    if pa.types.is_integer(typ):
        return int(pc.max(column).as_py())
    raise OptionError(f"EventTimeTimeout column has type {typ}; a timestamp or an integer "
                      "of epoch milliseconds is required")


class _Runs:
    """Splits Spark's Arrow batches into slices of one Kafka (topic, partition) each."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._pending: list[tuple[str, pa.RecordBatch]] = []

    def _fill(self) -> bool:
        while not self._pending:
            batch = next(self._batches, None)
            if batch is None:
                return False
            rest = batch
            while rest.num_rows:
                topics, parts = rest.column("topic"), rest.column("partition")
                topic, part = topics[0].as_py(), parts[0].as_py()
                if topic is None or part is None:
                    raise OrderViolationError("input row without topic/partition: the ordered "
                                              "stage needs Kafka coordinates on every row")
                same = pc.and_(pc.equal(topics, topic), pc.equal(parts, part))
                end = rest.num_rows if pc.all(same).as_py() else pc.index(same, False).as_py()
                self._pending.append((partition_id(topic, part), rest.slice(0, end)))
                rest = rest.slice(end)
        return True

    def peek(self) -> str | None:
        return self._pending[0][0] if self._fill() else None

    def take(self, pid: str) -> Iterator[pa.RecordBatch]:
        """Slices while the input stays on partition ``pid``."""
        while self._fill() and self._pending[0][0] == pid:
            yield self._pending.pop(0)[1]


class PartitionRun:
    """Processes one Kafka partition's slices of one batch against its open state (executor;
    the driver in a replay, on a private state copy)."""

    def __init__(self, options: OrderedOptions, func: UserFunction, plan: BatchPlan,
                 pid: str, base: PartitionBase, table: KeyedStateTable) -> None:
        self.options = options
        self.func = func
        self.plan = plan
        self.pid = pid
        self.base = base
        self.table = table
        self.first_offset: int | None = None
        self.last_offset = base.last_offset
        self.max_event_ms = base.max_event_ms
        self.records = 0
        self.output_rows = 0
        self.timeouts = 0
        self.next_timeout_ms: int | None = base.next_timeout_ms
        timeout = options.timeout
        self.kind = timeout.kind
        self.default_timeout_ms = (timeout.default_ms
                                   if isinstance(timeout, ProcessingTimeTimeout) else None)
        self.delay_ms = timeout.delay_ms if isinstance(timeout, EventTimeTimeout) else 0

    def watermark_ms(self) -> int | None:
        """The event-time watermark (largest event time seen minus the delay, epoch ms), or None."""
        return None if self.max_event_ms is None else self.max_event_ms - self.delay_ms

    def outputs(self, slices: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Arrow batches of output rows (bounded): the function called once per record in
        offset order, then once per key whose timeout passed.

        Parameters
        ----------
        slices
            The partition's input slices, in offset order.

        Raises
        ------
        OrderViolationError
            Offsets out of order, or not after the last committed one.
        UserFunctionError
            The function's result is not rows that fit ``output_schema``; what the function
            raises propagates with a note naming the Kafka offset and key."""
        options = self.options
        schema = options.output_schema
        limit = options.output_batch_rows
        buffer: list[Any] = []
        table = self.table
        state = GroupState(self.kind, self.plan.processing_time_ms, self.watermark_ms())
        func = self.func
        decoder = RecordDecoder(options.columns, options.key)
        processing = self.kind == "processing"
        # The timeout a call leaves on a key that exists when it set none itself (Spark's
        # rule: a call clears the key's timeout unless it sets one, or a default applies).
        default_deadline = (self.plan.processing_time_ms + self.default_timeout_ms
                            if processing and self.default_timeout_ms is not None else None)
        cached = table.cache.get
        load = table.load
        extend = buffer.extend
        for piece in slices:
            offsets = piece.column("offset")
            self._check_offsets(offsets)
            keys, encoded, records = decoder.decode(piece)
            for index, (key, encoded_key, record) in enumerate(zip(keys, encoded, records)):
                entry = cached(encoded_key) or load(encoded_key)
                # GroupState._bind(entry, False), inlined: this loop runs once per record.
                state._entry = entry
                state._timeout_set = False
                previous_timeout = entry.timeout_ms
                try:
                    out = func(key, record, state)
                    if out is not None:
                        out = as_rows(out)  # a list of rows, or what is wrong with the result
                except Exception as exc:
                    exc.add_note(f"{USER_FUNCTION_NOTE} at Kafka {self.pid} offset "
                                 f"{offsets[index].as_py()}, key {short_repr(key)} (batch "
                                 f"{self.plan.batch_id})")
                    raise
                if out is not None:
                    if out.__class__ is str:
                        raise refuse(out, key=key, where=self._at(offsets[index].as_py()))
                    extend(out)
                if not state._timeout_set:
                    wanted = default_deadline if entry.exists else None
                    if wanted != previous_timeout:
                        entry.timeout_ms = wanted
                        entry.dirty = True
                if len(buffer) >= limit:
                    self.output_rows += len(buffer)
                    yield self._to_batch(buffer, schema)
                    buffer.clear()
            self.records += piece.num_rows
            if self.kind == "event":
                seen = _event_ms(piece.column(options.timeout.column))  # type: ignore[union-attr]
                if seen is not None and (self.max_event_ms is None or seen > self.max_event_ms):
                    self.max_event_ms = seen
        # timeouts: once per batch, after the records
        threshold = (self.plan.processing_time_ms if processing
                     else self.watermark_ms() if self.kind == "event" else None)
        if threshold is not None:
            state = GroupState(self.kind, self.plan.processing_time_ms, self.watermark_ms())
            for timed_out in table.expired(threshold):
                entry = table.load(timed_out)
                state._bind(entry, True)
                key = decode_key(timed_out)
                try:
                    out = func(key, None, state)
                    if out is not None:
                        out = as_rows(out)
                except Exception as exc:
                    exc.add_note(f"{USER_FUNCTION_NOTE}'s timeout call for key "
                                 f"{short_repr(key)} of Kafka {self.pid} (batch "
                                 f"{self.plan.batch_id})")
                    raise
                if out is not None:
                    if out.__class__ is str:
                        raise refuse(out, key=key, where=self._at(None))
                    buffer.extend(out)
                if not state._timeout_set:
                    entry.timeout_ms = None
                entry.dirty = True
                self.timeouts += 1
                if len(buffer) >= limit:
                    self.output_rows += len(buffer)
                    yield self._to_batch(buffer, schema)
                    buffer.clear()
        table.flush()
        self.next_timeout_ms = table.next_timeout_ms() if self.kind != "none" else None
        if buffer:
            self.output_rows += len(buffer)
            yield self._to_batch(buffer, schema)

    def _at(self, offset: int | None) -> str:
        """Where a call happened, for errors: the Kafka topic, partition and offset."""
        topic, number = split_partition_id(self.pid)
        call = f"offset {offset}" if offset is not None else "its timeout call"
        return (f"Kafka topic {topic!r} partition {number} {call} "
                f"(batch {self.plan.batch_id})")

    def _check_offsets(self, offsets: pa.Array) -> None:
        first = offsets[0].as_py()
        if self.last_offset is not None and first <= self.last_offset:
            raise OrderViolationError(
                f"Kafka {self.pid}: batch {self.plan.batch_id} starts at offset {first} but "
                f"offset {self.last_offset} was already processed (in this batch or committed "
                "state). Each Kafka partition must reach the ordered stage once per batch, in "
                "offset order (use the orderedkafka source; do not repartition or union it)")
        if len(offsets) > 1:
            # steps[i] = offsets[i] - offsets[i - 1] (steps[0] is null)
            backwards = pc.fill_null(pc.less_equal(pc.pairwise_diff(offsets), 0), False)
            bad = pc.sum(backwards).as_py() or 0
            if bad:
                where = pc.index(backwards, True).as_py()
                raise OrderViolationError(
                    f"Kafka {self.pid}: {bad} offset(s) out of order in batch "
                    f"{self.plan.batch_id}, first at offset {offsets[where].as_py()} after "
                    f"{offsets[where - 1].as_py()}. The ordered stage needs rows in offset order "
                    "(no shuffle between the source and the stage)")
        if self.first_offset is None:
            self.first_offset = first
        self.last_offset = offsets[-1].as_py()

    _to_batch = staticmethod(to_batch)  # rows -> one Arrow batch (statestore.ordered.rows)


class OrderedTask:
    """The ``mapInArrow`` function of one batch. Pickled to executors (holds only options,
    the user function, the plan and the secret ``kafka.*`` settings ``emit = ranges`` rows
    lack); called once per Spark partition. Every method runs on the executor."""

    def __init__(self, options: OrderedOptions, func: UserFunction, plan: BatchPlan,
                 sink: FencedParquetOptions, *, kafka_secrets: KafkaSecrets | None = None,
                 ) -> None:
        self.options = options
        self.func = func
        self.plan = plan
        self.sink = sink
        self.kafka_secrets = kafka_secrets if kafka_secrets is not None else KafkaSecrets()
        self.head_read_s: dict[str, float] = {}  # time to a range's first records

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_pandas_lazy()  # building output arrays must not import pandas (core.pandaslazy)
        batches = iter(batches)
        first = next(batches, None)
        if first is None:
            return
        batches = itertools.chain([first], batches)
        if is_range_columns(first.schema.names):
            yield from self._read_ranges(batches)
            return
        runs = _Runs(batches)
        done: set[str] = set()
        while (pid := runs.peek()) is not None:
            if pid in done:
                raise OrderViolationError(
                    f"Kafka {pid} appears twice in one task of batch {self.plan.batch_id}: "
                    "its rows are not contiguous (the input was shuffled or unioned)")
            done.add(pid)
            commit = self.run_partition(pid, runs.take(pid))
            yield pa.RecordBatch.from_pylist([{"commit": commit.to_json()}], schema=COMMIT_SCHEMA)

    def _read_ranges(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``orderedkafka`` with ``emit = ranges``: read each described range here, in this
        worker, and process it like the records mode would have delivered them (two ranges
        in flight: ``statestore.ordered.inflight``)."""

        def run(item: tuple[str, Any, Any]) -> PartitionCommit | None:
            pid, rng, reader_options = item
            slices = self.range_slices(rng, reader_options)
            if slices is None:
                self.head_read_s.pop(pid, None)
                return None
            return self.run_partition(pid, slices)

        for commit in in_order(run, self.ranges(batches), depth=partitions_in_flight(),
                                 light=lambda item: light_range(item[1])):
            if commit is not None:  # nothing to read: no rows, as in records mode
                yield pa.RecordBatch.from_pylist([{"commit": commit.to_json()}],
                                                 schema=COMMIT_SCHEMA)

    def ranges(self, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, Any, Any]]:
        """``(partition id, range, reader options)`` of each range the input rows describe.

        Parameters
        ----------
        batches
            The task's input rows.

        Raises
        ------
        OrderViolationError
            A Kafka partition is described twice in one task (a split or repartitioned range)."""
        done: set[str] = set()
        for batch in batches:
            for rng, reader_options in described(batch, self.kafka_secrets):
                pid = partition_id(rng.topic, rng.partition)
                if pid in done:
                    raise OrderViolationError(
                        f"Kafka {pid} appears twice in one task of batch {self.plan.batch_id}: "
                        "its range was split (orderedkafka minPartitions / "
                        "maxRecordsPerPartition) or the ranges were repartitioned")
                done.add(pid)
                yield pid, rng, reader_options

    def range_slices(self, rng: Any, reader_options: Any) -> Iterator[pa.RecordBatch] | None:
        """One described Kafka range read here, its columns checked and narrowed; None when
        the range holds no record.

        Parameters
        ----------
        rng, reader_options
            The Kafka range and the source's reader options for it.

        Raises
        ------
        OptionError
            The records lack a column the stage needs."""
        began = time.perf_counter()
        records = read_range(rng, reader_options)
        head = next(records, None)
        # reported with the partition's figures (by partition: two ranges run at once)
        self.head_read_s[partition_id(rng.topic, rng.partition)] = time.perf_counter() - began
        if head is None:
            return None
        self.options.check_input(head.schema.names)
        slices: Iterator[pa.RecordBatch] = itertools.chain([head], records)
        if self.options.columns is not None:
            wanted = self.options.required_columns()
            slices = (b.select(wanted) for b in slices)
        return slices

    def run_timeouts_only(self, pid: str) -> PartitionCommit:
        """:meth:`run_partition` for a partition without records whose timeouts are due.

        Parameters
        ----------
        pid
            The Kafka partition's id."""
        return self.run_partition(pid, iter(()))

    def run_partition(self, pid: str, slices: Iterable[pa.RecordBatch]) -> PartitionCommit:
        """Process one Kafka partition's records of this batch and prepare its commit: the
        state opened at the plan's version, the rows written, the state candidate prepared.

        Parameters
        ----------
        pid
            The Kafka partition's id.
        slices
            Its input slices, in offset order.

        Returns
        -------
        PartitionCommit
            Output files, state candidate, offsets, counts and the task's metrics.

        Raises
        ------
        OrderViolationError, UserFunctionError
            As :meth:`PartitionRun.outputs`.
        CorruptStateError
            The base version's state cannot be restored."""
        started = time.perf_counter()
        topic, number = split_partition_id(pid)
        base = self.plan.base(pid)
        attempt = f"b{self.plan.batch_id}-{task_attempt_id()}"
        store, part = open_partition(self.options, topic, number, base, writer=attempt)
        try:
            opened = time.perf_counter()
            run = PartitionRun(self.options, self.func, self.plan, pid, base,
                               KeyedStateTable(part, self.options.max_cached_keys))
            files = write_parquet_files(exclusive(run.outputs(slices)), self.sink,
                                        attempt=f"{topic}-{number}-{attempt}")
            processed = time.perf_counter()
            candidate = part.prepare_commit(self.plan.batch_id, writer=attempt)
            num_keys = part.num_keys(space=STATE_SPACE)
        finally:
            part.close()
        finished = time.perf_counter()
        head_read_s = self.head_read_s.pop(pid, 0.0)  # of this partition's range
        metrics = {"started_at": round(time.time() - (finished - started), 3),  # epoch s
                   "pid": os.getpid(),
                   "head_read_s": round(head_read_s, 4),  # the range's first records
                   "open_s": round(opened - started, 4),
                   "process_s": round(processed - opened, 4),
                   "commit_s": round(finished - processed, 4),
                   "state": candidate.metrics.to_dict(), "cwd": os.getcwd()}
        restore = store.last_restore
        if restore is not None:
            metrics["restore"] = restore.to_dict()
        # A restore: a committed version opened without reusing this executor's local copy.
        metrics["reused_local"] = bool(restore is not None and restore.reused_local)
        metrics["restored"] = bool(base.version != EMPTY_VERSION and restore is not None
                                   and not restore.reused_local)
        metrics["bytes_downloaded"] = int(restore.bytes_downloaded if restore is not None else 0)
        placed_on = spark_executor_id()
        metrics["spark_executor_id"] = placed_on
        metrics["spark_partition"] = spark_partition_index()
        return PartitionCommit(
            partition_id=pid, batch_id=self.plan.batch_id,
            files=tuple(f.to_dict() for f in files), candidate=candidate.to_json(),
            manifest=candidate.manifest_path, first_offset=run.first_offset,
            last_offset=run.last_offset, records=run.records, output_rows=run.output_rows,
            timeouts=run.timeouts, max_event_ms=run.max_event_ms,
            next_timeout_ms=run.next_timeout_ms, num_keys=num_keys,
            executor=placed_on or executor_id(),
            task_attempt=attempt, metrics=metrics)
