"""Table schema rules: the first batch fixes the schema; later batches may only add nullable
columns. Checked on the driver before any file is written.

Schemas travel in commit records as base64 Arrow IPC (exact types, nothing lost).
"""

from __future__ import annotations

import base64

import pyarrow as pa

from orderedstream.core.errors import SchemaMismatchError


def encode_schema(schema: pa.Schema) -> str:
    """``schema`` as the text a commit record stores: base64 Arrow IPC, metadata dropped.

    Parameters
    ----------
    schema
        The table schema to store.

    Returns
    -------
    str
        Base64 text that ``decode_schema`` turns back into the same schema.

    Runs on
    -------
    driver"""
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode()


def decode_schema(text: str) -> pa.Schema:
    """The schema a commit record stores (``encode_schema``'s text).

    Parameters
    ----------
    text
        Base64 Arrow IPC of a schema.

    Returns
    -------
    pyarrow.Schema
        The stored schema, types exact.

    Raises
    ------
    binascii.Error, pyarrow.ArrowInvalid
        ``text`` is not base64, or not a serialized Arrow schema.

    Runs on
    -------
    driver"""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def spark_to_arrow(spark_schema: object) -> pa.Schema:
    """Arrow schema of a Spark StructType (timestamps as UTC microseconds, like Spark's Arrow).

    Parameters
    ----------
    spark_schema
        A ``pyspark.sql.types.StructType``.

    Returns
    -------
    pyarrow.Schema
        The schema the writers' Arrow batches have.

    Runs on
    -------
    driver"""
    from orderedstream.core.sparkcompat import to_arrow_schema_utc

    return to_arrow_schema_utc(spark_schema)


def evolve(table: pa.Schema | None, batch: pa.Schema, where: str,
           partition_by: tuple[str, ...] = ()) -> pa.Schema:
    """The table schema after appending a batch of ``batch`` schema, or SchemaMismatchError.

    Accepted: the same columns with the same types (order may differ), plus new nullable
    columns (appended at the end). Refused: a missing column, a changed type, a new
    non-nullable column. ``partition_by`` columns must exist in the batch.

    Parameters
    ----------
    table
        The table's schema now; None before the first batch (the batch's schema is taken).
    batch
        The schema of the batch to append.
    where
        How the error names the table (e.g. ``"table s3://lake/events"``).
    partition_by
        The writer's partition columns.

    Returns
    -------
    pyarrow.Schema
        The table schema after the batch: the table's columns, then the new ones.

    Raises
    ------
    SchemaMismatchError
        A partition column is not in the batch, the batch names a column twice, or its
        schema is not the table's plus new nullable columns; every problem is listed.

    Runs on
    -------
    driver"""
    missing_parts = [c for c in partition_by if c not in batch.names]
    if missing_parts:
        raise SchemaMismatchError(f"{where}: partitionBy column(s) {missing_parts} are not in "
                                  f"the batch (columns: {batch.names})")
    if len(set(batch.names)) != len(batch.names):
        raise SchemaMismatchError(f"{where}: the batch has duplicate column names {batch.names}")
    if table is None:
        return batch
    problems = []
    for field in table:
        if field.name not in batch.names:
            problems.append(f"column {field.name!r} ({field.type}) is missing")
        elif not batch.field(field.name).type.equals(field.type):
            problems.append(f"column {field.name!r} changed type from {field.type} to "
                            f"{batch.field(field.name).type}")
    added = [f for f in batch if f.name not in table.names]
    problems += [f"new column {f.name!r} must be nullable" for f in added if not f.nullable]
    if problems:
        raise SchemaMismatchError(
            f"{where}: the batch's schema cannot be appended to the table's: "
            + "; ".join(problems)
            + ". Accepted changes: new nullable columns only (table columns: "
            + ", ".join(f"{f.name} {f.type}" for f in table) + ")")
    return pa.schema(list(table) + added) if added else table
