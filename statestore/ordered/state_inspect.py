"""Query the ordered stage's committed state: key counts, one key's value at any committed
version, one key's history across versions.

Every batch's commit record names each Kafka partition's state version, so "the state as of
batch N" is exact and needs no running query. Each lookup opens the version as a private
read-only copy in a temp folder; nothing is written to the state location.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from orderedstream.core.errors import OptionError, StateNotFoundError
from orderedstream.statestore.base import EMPTY_VERSION
from orderedstream.statestore.ordered.keyed_state import STATE_SPACE, encode_key
from orderedstream.statestore.ordered.options import OrderedOptions
from orderedstream.statestore.ordered.plan import PartitionBase, bases_from_extra, partition_id
from orderedstream.statestore.ordered.replay import _batch_log
from orderedstream.statestore.ordered.state_access import open_store

DEFAULT_HISTORY_BATCHES = 20


@dataclass(frozen=True)
class KeyVersion:
    """One key as of one committed batch: ``exists`` False when the key had no state."""

    batch_id: int
    version: int
    exists: bool
    value: Any = None
    timeout_ms: int | None = None


class StateInspector:
    """Committed state of an ordered stage. Every method runs on the driver (or any process
    that reaches the output and state locations).

    Parameters
    ----------
    output
        The stage's output table, whose commit records name the state versions.
    state
        The stage's state location.
    storage_options
        fsspec options for both."""

    def __init__(self, *, output: str, state: str,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.output = output
        self.storage_options = dict(storage_options or {})
        self.log = _batch_log(output, self.storage_options)
        self.options = OrderedOptions(
            state_location=state, output=output, output_schema=pa.schema([("row", pa.null())]),
            storage_options=self.storage_options,
            store_options={"local_dir": tempfile.gettempdir()}, placement="off")

    def _record(self, batch_id: int | None) -> Any:
        record = (self.log.latest_batch_record() if batch_id is None
                  else self.log.get(int(batch_id)))
        if record is None:
            raise StateNotFoundError(
                f"no committed batch {'at all' if batch_id is None else batch_id} at "
                f"{self.output} (latest: {self.log.latest()})")
        return record

    def partitions(self, batch_id: int | None = None) -> dict[str, PartitionBase]:
        """Kafka partition -> its state version as of a batch.

        Parameters
        ----------
        batch_id
            The committed batch; ``None``: the latest.

        Returns
        -------
        dict[str, PartitionBase]
            The carried-forward map of that batch's commit record.

        Raises
        ------
        StateNotFoundError
            The batch (or any batch) is not committed."""
        return bases_from_extra(self._record(batch_id).extra)

    def key_count(self, topic: str, partition: int, batch_id: int | None = None) -> int:
        """Keys in one partition's state as of a batch (counted in the state itself).

        Parameters
        ----------
        topic, partition
            The Kafka partition.
        batch_id
            The committed batch; ``None``: the latest.

        Returns
        -------
        int
            The key count; 0 for a partition without state.

        Raises
        ------
        StateNotFoundError
            The batch is not committed, or the version is not at the state location (a wrong
            location, or retention deleted it)."""
        base = self.partitions(batch_id).get(partition_id(topic, partition))
        if base is None or base.version == EMPTY_VERSION or base.manifest is None:
            return 0
        with self._open(topic, partition, base) as part:
            return int(part.num_keys(space=STATE_SPACE))

    def _open(self, topic: str, partition: int, base: PartitionBase) -> Any:
        assert base.manifest is not None  # callers check EMPTY_VERSION / no manifest first
        store = open_store(self.options, topic, {(partition, base.version): base.manifest})
        fs, root = store.filesystem()
        if not fs.exists(f"{root}/{base.manifest}"):  # a wrong state URL finds nothing there
            raise StateNotFoundError(
                f"the state of Kafka {partition_id(topic, partition)} at version "
                f"{base.version} (named by {self.output}'s commits) is not at "
                f"{store.location.url}/{base.manifest}: either {self.options.state_location} "
                "is not this output's state location, or retention deleted that version "
                "(only the last keep_batches batches keep their state)")
        return store.open_read_only(partition, base.version)

    def value(self, topic: str, partition: int, key: Any,
              batch_id: int | None = None) -> KeyVersion:
        """One key's state as committed by a batch.

        Parameters
        ----------
        topic, partition
            The Kafka partition.
        key
            The grouping key, as the user function gets it.
        batch_id
            The committed batch; ``None``: the latest.

        Returns
        -------
        KeyVersion
            The value and timeout, or ``exists`` False.

        Raises
        ------
        StateNotFoundError
            The batch is not committed, the partition has no state as of it (its partitions
            are listed), or the version is not at the state location."""
        record = self._record(batch_id)
        bases = bases_from_extra(record.extra)
        pid = partition_id(topic, partition)
        if pid not in bases:
            raise StateNotFoundError(
                f"Kafka {pid} has no state as of batch {record.batch_id} of {self.output}; "
                f"the partitions it has: {', '.join(sorted(bases)) or 'none'}")
        return self._value(int(record.batch_id), topic, partition, key, bases[pid])

    def _value(self, batch_id: int, topic: str, partition: int, key: Any,
               base: PartitionBase | None) -> KeyVersion:
        if base is None or base.version == EMPTY_VERSION or base.manifest is None:
            return KeyVersion(batch_id, EMPTY_VERSION, False)
        with self._open(topic, partition, base) as part:
            found = part.get(encode_key(key), None, space=STATE_SPACE)
        if found is None:
            return KeyVersion(batch_id, base.version, False)
        value, timeout = found
        return KeyVersion(batch_id, base.version, True, value, timeout)

    def history(self, topic: str, partition: int, key: Any, *, first: int | None = None,
                last: int | None = None) -> Iterator[KeyVersion]:
        """One key at every state version of the partition committed by batches ``first..last``,
        oldest first; batches that did not change the partition are skipped.

        Parameters
        ----------
        topic, partition
            The Kafka partition.
        key
            The grouping key.
        first, last
            The batches, inclusive; default: the last ``DEFAULT_HISTORY_BATCHES`` committed.

        Returns
        -------
        Iterator[KeyVersion]
            One entry per version.

        Raises
        ------
        OptionError
            ``first`` is after ``last``.
        StateNotFoundError
            A version is not at the state location (a wrong location, or retention deleted it)."""
        if first is not None and last is not None and int(first) > int(last):
            raise OptionError(f"state history: the first batch {first} is after the last "
                              f"batch {last}; give first <= last")
        newest = self.log.latest()
        if newest is None:
            return
        last = newest if last is None else min(int(last), newest)
        first = max(0, last - DEFAULT_HISTORY_BATCHES + 1) if first is None else int(first)
        pid = partition_id(topic, partition)
        seen: int | None = None
        for batch_id in range(first, last + 1):
            record = self.log.get(batch_id)
            if record is None:
                continue
            base = bases_from_extra(record.extra).get(pid)
            version = EMPTY_VERSION if base is None else base.version
            if version == seen:
                continue
            seen = version
            yield self._value(batch_id, topic, partition, key, base)


__all__ = ["DEFAULT_HISTORY_BATCHES", "KeyVersion", "StateInspector"]
