"""``emit = ranges``: rows describing a batch's offset ranges instead of holding its records.

With ``.option("emit", "ranges")`` the ``orderedkafka`` source yields one row per task: the
topic, partition and ``[startOffset, endOffset)`` of its range plus the reader's options
(pickled). Nothing is read from Kafka until the DataFrame's consumer reads the range itself
(``orderedstream.python_datasource.reader.read_range``), in its own Python worker.
``OrderedStateful`` does that, which skips the source worker -> JVM rows -> Arrow ->
``mapInArrow`` worker hop of every record. Offsets are still planned, logged and committed by
Spark exactly as in the default ``records`` mode.

Rows are data (they can be shown, cached, written), so the pickled options never hold secret
``kafka.*`` values, only their names: the reading side is handed the values itself
(``OrderedStateful(kafka_options=...)``, shipped inside its task like Spark ships any
function) and :func:`described` merges them, or fails naming the options it lacks.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from orderedstream.python_datasource.client_config import KafkaSecrets
from orderedstream.python_datasource.options import OrderedKafkaOptions
from orderedstream.python_datasource.planning import OffsetRange

if TYPE_CHECKING:  # pyarrow is imported where rows are made: not by load()'s schema step
    import pyarrow as pa

RANGE_COLUMNS = ("topic", "partition", "startOffset", "endOffset", "reader")


def range_schema() -> StructType:
    """The Spark schema of ``emit = ranges`` rows."""
    return StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                       StructField("startOffset", LongType()), StructField("endOffset", LongType()),
                       StructField("reader", BinaryType())])


def is_range_columns(columns: Sequence[str]) -> bool:
    """Whether a DataFrame's or batch's columns are those of ``emit = ranges`` rows.

    Parameters
    ----------
    columns
        The column names, in order.

    Returns
    -------
    bool
        True when they are exactly :data:`RANGE_COLUMNS`.

    Runs on
    -------
    driver and executor"""
    return tuple(columns) == RANGE_COLUMNS


def describe(rng: OffsetRange, options: OrderedKafkaOptions) -> pa.RecordBatch:
    """The one-row batch describing ``rng`` (what the source yields instead of its records);
    the options go without their secret values.

    Parameters
    ----------
    rng
        The range a task would read.
    options
        The source's parsed options.

    Returns
    -------
    pyarrow.RecordBatch
        One row with the :data:`RANGE_COLUMNS`.

    Runs on
    -------
    executor (the source's ``read``)"""
    import pyarrow as pa

    reader = pickle.dumps((rng, options.without_secrets()))
    return pa.RecordBatch.from_arrays(
        [pa.array([rng.topic]), pa.array([rng.partition], pa.int32()),
         pa.array([rng.start], pa.int64()), pa.array([rng.end], pa.int64()),
         pa.array([reader], pa.binary())], names=list(RANGE_COLUMNS))


def described(batch: pa.RecordBatch, secrets: KafkaSecrets | None = None,
              ) -> Iterator[tuple[OffsetRange, OrderedKafkaOptions]]:
    """The ranges (and reader options) a batch of ``emit = ranges`` rows describes, with the
    secret ``kafka.*`` values the rows lack taken from ``secrets``.

    Parameters
    ----------
    batch
        Rows with the :data:`RANGE_COLUMNS`.
    secrets
        The secret ``kafka.*`` values the reading side was handed; None for none.

    Returns
    -------
    Iterator[tuple[OffsetRange, OrderedKafkaOptions]]
        Each row's range and the options to read it with, secrets restored.

    Raises
    ------
    OptionError
        A row needs a secret option that ``secrets`` lacks; the message names them.

    Runs on
    -------
    wherever the rows are read (usually an executor)"""
    given = secrets if secrets is not None else KafkaSecrets()
    for raw in batch.column("reader").to_pylist():
        rng, options = pickle.loads(raw)
        yield rng, options.with_secrets(given)
