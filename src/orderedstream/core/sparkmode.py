"""Classic or Spark Connect session: what the pack's library paths may ask of each.

A Spark Connect session has no ``sparkContext`` (no RDDs, no local properties, no JVM): the
library paths go through this module for what they used those for, so the same code runs on a
classic and on a Connect session (``docs/connect.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

ITEM_COLUMN = "item"
"""The column of :func:`items_frame`'s rows (one JSON text per item)."""


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (pyspark's ``sql.connect`` session class).

    Never imports the Connect client (its gRPC packages): when nothing imported it, no session
    can be one.

    Parameters
    ----------
    spark
        A SparkSession, classic or Connect.

    Returns
    -------
    bool
        True for a Connect session.

    Runs on
    -------
    driver
    """
    import sys

    module = sys.modules.get("pyspark.sql.connect.session")
    if module is None:
        return False
    return isinstance(spark, module.SparkSession)


def default_parallelism(spark: Any) -> int:
    """The session's default number of tasks.

    Parameters
    ----------
    spark
        A SparkSession, classic or Connect.

    Returns
    -------
    int
        ``sparkContext.defaultParallelism`` on a classic session; under Connect
        ``spark.default.parallelism`` if set, else the thread count of a ``local[N]`` master,
        else 2.

    Raises
    ------
    ValueError
        Under Connect, ``spark.default.parallelism`` is not an integer.

    Runs on
    -------
    driver
    """
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    value = spark.conf.get("spark.default.parallelism", None)
    if value:
        return max(1, int(value))
    master = str(spark.conf.get("spark.master", None) or "")
    threads = master[len("local["):].split(",")[0].rstrip("]")
    if master.startswith("local[") and threads.isdigit():
        return max(1, int(threads))
    return 2


def text_frame(spark: Any, texts: Iterable[str], partitions: int | None = None, *,
               column: str = ITEM_COLUMN) -> Any:
    """A DataFrame of one string column, a row per text, spread over Spark partitions.

    A classic session parallelizes the texts (an RDD); a Connect session, which has no RDDs,
    sends them in the plan (``createDataFrame``) and spreads them by range.

    Parameters
    ----------
    spark
        A SparkSession, classic or Connect.
    texts
        The rows' texts.
    partitions
        How many partitions; None for one per text.
    column
        The column's name.

    Returns
    -------
    DataFrame
        The frame, its rows not yet computed.

    Runs on
    -------
    driver
    """
    rows = list(texts)
    count = max(1, partitions if partitions is not None else len(rows))
    if not is_connect(spark):
        rdd = spark.sparkContext.parallelize([(t,) for t in rows], count)
        return spark.createDataFrame(rdd, f"`{column}` string")
    frame = spark.createDataFrame([(i, t) for i, t in enumerate(rows)],
                                  f"i long, `{column}` string")
    if rows:
        frame = frame.repartitionByRange(min(count, len(rows)), "i")
    return frame.select(column)


def items_frame(spark: Any, items: Iterable[Any], partitions: int | None = None) -> Any:
    """:func:`text_frame` of ``items`` as JSON texts, in column :data:`ITEM_COLUMN`.

    Parameters
    ----------
    spark
        A SparkSession, classic or Connect.
    items
        JSON-serialisable values.
    partitions
        How many partitions; None for one per item.

    Returns
    -------
    DataFrame
        The frame.

    Raises
    ------
    TypeError
        An item is not JSON-serialisable.

    Runs on
    -------
    driver
    """
    return text_frame(spark, (json.dumps(item) for item in items), partitions)


def map_items(spark: Any, items: Iterable[Any], func: Callable[[Any], str],
              partitions: int | None = None) -> list[str]:
    """Run ``func(item)`` for each item in Spark tasks and collect the results, in no particular
    order. A classic session maps an RDD; a Connect session maps :func:`items_frame` with
    ``mapInArrow`` (so items travel as JSON there).

    Parameters
    ----------
    spark
        A SparkSession, classic or Connect.
    items
        The items (JSON-serialisable under Connect).
    func
        Called on an executor with one item; returns text.
    partitions
        How many tasks; None for one per item.

    Returns
    -------
    list[str]
        The results.

    Raises
    ------
    Exception
        Spark's error for a failed task (``func``'s error inside it).

    Runs on
    -------
    driver (``func`` on the executors)
    """
    if not is_connect(spark):
        values = list(items)
        rdd = spark.sparkContext.parallelize(values, max(1, partitions or len(values)))
        return list(rdd.map(func).collect())
    frame = items_frame(spark, items, partitions)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            out = [func(json.loads(t)) for t in batch.column(0).to_pylist()]
            yield pa.RecordBatch.from_pydict({"result": pa.array(out, pa.string())})

    return [row["result"] for row in frame.mapInArrow(run, "result string").collect()]


__all__ = ["ITEM_COLUMN", "default_parallelism", "is_connect", "items_frame", "map_items",
           "text_frame"]
