"""Replay committed batches of one Kafka partition in this Python process, and compare.

Production state and output are only read; the replay's state is a private copy and its rows
go to a scratch folder. Usage and the command line: docs/replay.md.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orderedstream.core.commitlog import CommitRecord
from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import OptionError, StateNotFoundError
from orderedstream.sinks.deltalog import open_batch_log
from orderedstream.sinks.schema import decode_schema
from orderedstream.statestore.base import EMPTY_VERSION
from orderedstream.statestore.ordered.keyed_state import STATE_SPACE, KeyedStateTable
from orderedstream.statestore.ordered.options import OrderedOptions
from orderedstream.statestore.ordered.output import CommittedFileReader
from orderedstream.statestore.ordered.plan import (
    EXTRA_KEY,
    BatchPlan,
    PartitionBase,
    bases_from_extra,
    partition_id,
)
from orderedstream.statestore.ordered.replay_diff import (
    OutputDiff,
    OutputSpill,
    StateDiff,
    diff_state,
)
from orderedstream.statestore.ordered.replay_source import (
    BatchRange,
    batch_range,
    check_retained,
    read_batch,
)
from orderedstream.statestore.ordered.replay_spec import (
    function_from_spec,
    load_function,
    timeout_from_spec,
)
from orderedstream.statestore.ordered.runner import PartitionRun
from orderedstream.statestore.ordered.state_access import open_partition, open_store


def _batch_log(output_url: str, storage_options: Mapping[str, Any]) -> Any:
    """The output table's batch log (read API: ``get``, ``latest``, ``latest_batch_record``):
    a Delta table's ``DeltaBatchLog`` or a fenced Parquet table's ``CommitLog``."""
    return open_batch_log(output_url, storage_options)


@dataclass(frozen=True)
class BatchReplay:
    """One replayed batch of the partition."""

    batch_id: int
    range: BatchRange
    ran: bool
    """False when the partition had nothing to do in the batch (no records, no due timeout)."""
    processing_time_ms: int
    records: int
    committed_records: int
    replayed_rows: int
    committed_rows: int
    timeouts: int
    output: OutputDiff
    scratch_file: str | None


@dataclass
class ReplayResult:
    """What a replay found: per batch, in total, and for the end state."""

    topic: str
    partition: int
    function: str
    scratch: str
    batches: list[BatchReplay] = field(default_factory=list)
    output: OutputDiff = field(default_factory=OutputDiff)
    state: StateDiff = field(default_factory=StateDiff)
    state_version: int = EMPTY_VERSION
    """The committed state version the end state was compared with."""

    @property
    def identical(self) -> bool:
        """True when every batch's output and the end state equal what was committed."""
        return self.output.identical and self.state.identical


def _section(record: CommitRecord, batch_id: int, output: str) -> dict[str, Any]:
    section = (record.extra or {}).get(EXTRA_KEY)
    if not isinstance(section, dict):
        raise OptionError(f"batch {batch_id} at {output} was not committed by the ordered "
                          "stage (its commit record has no ordered_state section)")
    return section


def _record(log: Any, batch_id: int, output: str) -> CommitRecord:
    record = log.get(batch_id)
    if record is None:
        raise StateNotFoundError(f"batch {batch_id} is not committed at {output} (latest "
                                 f"committed batch: {log.latest()})")
    return record  # type: ignore[no-any-return]


def _options(record: CommitRecord, section: Mapping[str, Any], *, state: str, output: str,
             storage_options: Mapping[str, Any], local_dir: str) -> OrderedOptions:
    spec = (section.get("replay") or {}).get("options")
    if not spec:
        raise OptionError(f"batch {record.batch_id} at {output} was committed before replay "
                          "information was recorded (no extra.ordered_state.replay): replay "
                          "batches committed by this version of orderedstream")
    schema = spec.get("output_schema") or record.schema  # the stage's, else the table's
    if schema is None:
        raise OptionError(f"batch {record.batch_id} at {output} has no output schema")
    columns = spec.get("columns")
    return OrderedOptions(
        state_location=state, output=output, output_schema=decode_schema(schema),
        key=spec.get("key"), timeout=timeout_from_spec(spec.get("timeout")),
        columns=None if columns is None else tuple(columns),
        max_cached_keys=int(spec.get("max_cached_keys") or 10_000),
        output_batch_rows=int(spec.get("output_batch_rows") or 8_192),
        storage_options=dict(storage_options), store_options={"local_dir": local_dir},
        placement="off")


def _start_base(log: Any, first: int, pid: str, output: str) -> PartitionBase:
    if first == 0:
        return PartitionBase()
    previous = log.get(first - 1)
    if previous is None:
        raise StateNotFoundError(f"batch {first - 1} (whose state batch {first} starts from) "
                                 f"is not in the commit log at {output}")
    return bases_from_extra(previous.extra).get(pid) or PartitionBase()


def _committed_batches(record: CommitRecord, task: Mapping[str, Any] | None, url: str,
                       storage_options: Mapping[str, Any], schema: pa.Schema,
                       ) -> Iterator[pa.RecordBatch]:
    """The rows the partition's task committed in ``record`` (its files, in write order)."""
    if not task:
        return
    paths = task.get("files")
    if paths is None:  # committed before files were recorded per task: the attempt names them
        attempt = str(task.get("task_attempt") or "\0")
        paths = [f.path for f in record.files if attempt in f.path]
    by_path = {f.path: f for f in record.files}
    files: list[DataFile] = [by_path[p] for p in paths if p in by_path]
    if not files:
        return
    reader = CommittedFileReader(url, storage_options, schema, schema)
    yield from reader(iter([pa.RecordBatch.from_pylist([{"file": f.to_json()} for f in files])]))


def _function(function: str | Callable[..., Any] | None,
              spec: Mapping[str, Any]) -> tuple[Callable[..., Any], str]:
    if function is None:
        return function_from_spec(spec), f"{spec.get('function')} (as committed)"
    if isinstance(function, str):
        return load_function(function), function
    if not callable(function):
        raise OptionError(f"replay(function={function!r}): MODULE:ATTR or a callable")
    return function, getattr(function, "__qualname__", repr(function))


def replay(*, output: str, state: str, checkpoint: str, topic: str, partition: int,
           first: int, last: int | None = None, bootstrap_servers: str,
           function: str | Callable[..., Any] | None = None,
           storage_options: Mapping[str, Any] | None = None,
           kafka_options: Mapping[str, str] | None = None, scratch: str | None = None,
           key_columns: list[str] | tuple[str, ...] | None = None) -> ReplayResult:
    """Replay batches ``first..last`` of one Kafka partition in this process and compare
    them with what they committed.

    It opens the partition's state at the version batch ``first`` started from as a private
    writable copy under ``scratch`` (never committed); reads each batch's offset range (query
    checkpoint ``offsets/N``) again from Kafka after checking that retention kept it; runs the
    function through the stage's own record loop with the batch's recorded processing time, so
    timeouts fire as they did (``breakpoint()`` in the function stops here); writes the rows to
    ``<scratch>/output/batch=N/<topic>-<partition>.parquet`` and compares them with the rows the
    partition's task committed, then the end state with the committed state version. Over a
    range, state flows from one replayed batch to the next (the new logic's own state).

    Parameters
    ----------
    output
        The output table's URL (Delta or fenced Parquet).
    state
        The stage's state location.
    checkpoint
        The query's ``checkpointLocation`` (its ``offsets/`` give each batch's range).
    topic, partition
        The Kafka partition to replay.
    first, last
        The batches, inclusive; ``last=None``: only ``first``.
    bootstrap_servers
        The Kafka brokers to read the records again from.
    function
        ``None``: the function the batch recorded; else ``MODULE:ATTR`` or a callable.
    storage_options
        fsspec options for the output, state and checkpoint locations.
    kafka_options
        Extra Kafka client options (e.g. ``kafka.security.protocol``).
    scratch
        Folder for the state copy and rows; never removed when given. ``None``: a new
        ``orderedstream-replay-*`` in the temp dir, kept when rows were written (the caller
        reads and deletes it), else removed, also when the replay fails.
    key_columns
        Output columns that identify a row in the comparison; ``None``: what the batch
        recorded, else the stage's key.

    Returns
    -------
    ReplayResult
        Per batch and in total: the output differences, and the end state's.

    Raises
    ------
    OptionError
        Bad batch numbers or ``function``; a batch not committed by the ordered stage, or
        without recorded replay information or processing time.
    StateNotFoundError
        A batch (or the one before ``first``) is not committed.
    DataLossError
        Kafka no longer holds a batch's offsets (naming topic, partition and offsets).

    Runs on
    -------
    driver (this process; no Spark job)"""
    last = first if last is None else last
    if first < 0 or last < first:
        raise OptionError(f"replay batches {first}..{last}: 0 <= first <= last is required")
    storage = dict(storage_options or {})
    log = _batch_log(output, storage)
    first_record = _record(log, first, output)
    first_section = _section(first_record, first, output)  # checked before a folder is made
    run = functools.partial(
        _replay, log, first_record, first_section, output=output, state=state,
        checkpoint=checkpoint, topic=topic, partition=partition, first=first, last=last,
        bootstrap_servers=bootstrap_servers, function=function, storage=storage,
        kafka_options=kafka_options, key_columns=key_columns)
    if scratch is not None:
        return run(scratch=scratch)
    own = tempfile.mkdtemp(prefix="orderedstream-replay-")
    try:
        result = run(scratch=own)
    except BaseException:  # refused, failed or interrupted: no half-written folder left
        shutil.rmtree(own, ignore_errors=True)
        raise
    if not any(b.scratch_file for b in result.batches):  # nothing to read afterwards
        shutil.rmtree(own, ignore_errors=True)
    return result


def _replay(log: Any, first_record: CommitRecord, first_section: dict[str, Any], *,
            scratch: str, output: str, state: str,
            checkpoint: str, topic: str, partition: int, first: int, last: int,
            bootstrap_servers: str,
            function: str | Callable[..., Any] | None, storage: dict[str, Any],
            kafka_options: Mapping[str, str] | None,
            key_columns: list[str] | tuple[str, ...] | None) -> ReplayResult:
    """:func:`replay` into the folder ``scratch``."""
    pid = partition_id(topic, partition)
    replay_info = first_section.get("replay") or {}
    local_dir = os.path.join(scratch, f"state-copy-{uuid.uuid4().hex[:8]}")
    options = _options(first_record, first_section, state=state, output=output,
                       storage_options=storage, local_dir=local_dir)
    func, name = _function(function, replay_info)
    keys = list(key_columns) if key_columns else list(
        replay_info.get("key_columns") or ([options.key] if options.key else []))
    result = ReplayResult(topic, partition, name, scratch)
    base = _start_base(log, first, pid, output)
    store, part = open_partition(options, topic, partition, base,
                                 writer=f"replay-{uuid.uuid4().hex[:8]}")
    del store
    try:
        table = KeyedStateTable(part, options.max_cached_keys)
        for batch_id in range(first, last + 1):
            record = first_record if batch_id == first else _record(log, batch_id, output)
            done, base = _replay_one(
                record, batch_id, options, func, table, base, pid, topic, partition,
                checkpoint=checkpoint, bootstrap=bootstrap_servers, kafka_options=kafka_options,
                scratch=scratch, keys=keys, output=output)
            result.batches.append(done)
            result.output.merge(done.output)
        end = bases_from_extra(_record(log, last, output).extra).get(pid) or PartitionBase()
        result.state_version = end.version
        result.state = _compare_state(options, topic, partition, end, part)
    finally:
        part.close()
        from orderedstream.statestore.rocksdb.keepopen import close_under

        close_under(local_dir)  # its copy is deleted next: not kept open either
        shutil.rmtree(local_dir, ignore_errors=True)
    return result


def _replay_one(record: CommitRecord, batch_id: int, options: OrderedOptions,
                func: Callable[..., Any], table: KeyedStateTable, base: PartitionBase, pid: str,
                topic: str, partition: int, *, checkpoint: str, bootstrap: str,
                kafka_options: Mapping[str, str] | None, scratch: str, keys: list[str],
                output: str) -> tuple[BatchReplay, PartitionBase]:
    section = _section(record, batch_id, output)
    task = (section.get("tasks") or {}).get(pid)
    clock = section.get("processing_time_ms")
    if clock is None:
        raise OptionError(f"batch {batch_id} at {output} has no recorded processing_time_ms "
                          "(committed before it was recorded): its timeouts cannot be replayed")
    rng = batch_range(checkpoint, batch_id, topic, partition,
                      committed_first=None if not task else task.get("first_offset"),
                      storage_options=options.storage_options)
    due = (options.timeout.kind == "processing" and base.next_timeout_ms is not None
           and base.next_timeout_ms < int(clock))
    ran = rng.end > rng.start or due
    diff = OutputDiff()
    replayed_rows = committed_rows = records = timeouts = 0
    target = None
    if ran or task:
        spill = OutputSpill(os.path.join(scratch, f"diff-{batch_id}"), options.output_schema,
                            keys, expected_rows=int((task or {}).get("output_rows") or 0))
        if ran:
            check_retained(rng, bootstrap, kafka_options)
            wanted = None if options.columns is None else options.required_columns()
            slices = read_batch(rng, bootstrap, columns=wanted, kafka_options=kafka_options)
            plan = BatchPlan(batch_id=batch_id, processing_time_ms=int(clock), bases={pid: base})
            run = PartitionRun(options, func, plan, pid, base, table)
            folder = os.path.join(scratch, "output", f"batch={batch_id}")
            os.makedirs(folder, exist_ok=True)
            target = os.path.join(folder, f"{topic}-{partition}.parquet")
            with pq.ParquetWriter(target, options.output_schema) as writer:
                for out in run.outputs(slices):
                    writer.write_batch(out)
                    spill.add("replayed", out)
            replayed_rows, records, timeouts = run.output_rows, run.records, run.timeouts
            base = PartitionBase(version=batch_id, last_offset=run.last_offset,
                                 max_event_ms=run.max_event_ms,
                                 next_timeout_ms=run.next_timeout_ms)
        for batch in _committed_batches(record, task, output, options.storage_options,
                                        options.output_schema):
            committed_rows += batch.num_rows
            spill.add("committed", batch)
        diff = spill.diff()
        shutil.rmtree(spill.directory, ignore_errors=True)
    return BatchReplay(batch_id, rng, ran, int(clock), records,
                       int((task or {}).get("records") or 0), replayed_rows, committed_rows,
                       timeouts, diff, target), base


def _compare_state(options: OrderedOptions, topic: str, partition: int, end: PartitionBase,
                   replayed: Any) -> StateDiff:
    """The replayed partition's state against the committed version ``end`` names."""
    if end.version == EMPTY_VERSION or end.manifest is None:
        return diff_state(iter(()), replayed.range(space=STATE_SPACE))
    store = open_store(options, topic, {(partition, end.version): end.manifest})
    with store.open_read_only(partition, end.version) as committed:
        return diff_state(committed.range(space=STATE_SPACE), replayed.range(space=STATE_SPACE))


__all__ = ["BatchReplay", "ReplayResult", "replay"]
