"""A stream reader that only reports why the stream's options were refused.

Spark asks a Python data source for its stream reader inside pyspark's streaming runner, whose
error path then calls ``stop()`` on a reader it never got: an OptionError raised there ends
with a misleading ``UnboundLocalError: cannot access local variable 'reader'``. Handing the
runner this reader instead makes the refusal surface, reason first, from the first call Spark
makes on it (its offset planning), and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from orderedstream.core.errors import OrderedStreamError
from orderedstream.core.sparkcompat import ReadLimit, SupportsTriggerAvailableNow
from orderedstream.core.worker_errors import reason_first_in_worker


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Raises ``error`` from every planning call (``stop`` excepted)."""

    def __init__(self, error: OrderedStreamError) -> None:
        self.error = error

    @reason_first_in_worker
    def initialOffset(self) -> dict:
        """Spark asks for a new query's first start offset: raise the refusal.

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        driver"""
        raise self.error

    @reason_first_in_worker
    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark asks how much one batch may read: raise the refusal.

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        driver"""
        raise self.error

    @reason_first_in_worker
    def prepareForTriggerAvailableNow(self) -> None:
        """Spark starts a Trigger.AvailableNow run: raise the refusal.

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        driver"""
        raise self.error

    @reason_first_in_worker
    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Spark asks for the next batch's end offset: raise the refusal.

        Parameters
        ----------
        start
            The batch's start offset (unused).
        limit
            Spark's read limit (unused).

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        driver"""
        raise self.error

    @reason_first_in_worker
    def reportLatestOffset(self) -> dict | None:
        """Spark asks for the newest offsets for query progress: raise the refusal.

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        driver"""
        raise self.error

    @reason_first_in_worker
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Spark asks for a batch's input partitions: raise the refusal.

        Parameters
        ----------
        start
            The batch's start offset (unused).
        end
            The batch's end offset (unused).

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        driver"""
        raise self.error

    @reason_first_in_worker
    def commit(self, end: dict) -> None:
        """Spark reports a batch done: raise the refusal.

        Parameters
        ----------
        end
            The batch's end offset (unused).

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        driver"""
        raise self.error

    @reason_first_in_worker
    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Spark reads one input partition: raise the refusal.

        Parameters
        ----------
        partition
            The partition to read (unused).

        Raises
        ------
        OrderedStreamError
            Always: ``error``, why the stream's options were refused.

        Runs on
        -------
        executor"""
        raise self.error

    def stop(self) -> None:
        """Nothing was opened."""


__all__ = ["RefusedStreamReader"]
