"""Table schema rules: the first batch fixes the schema; later batches may only add nullable
columns. Checked on the driver before any file is written.

Schemas travel in commit records as base64 Arrow IPC (exact types, nothing lost).
"""

from __future__ import annotations

import base64

import pyarrow as pa

from orderedstream.core.errors import SchemaMismatchError


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode()


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def spark_to_arrow(spark_schema: object) -> pa.Schema:
    """Arrow schema of a Spark StructType (timestamps as UTC microseconds, like Spark's Arrow)."""
    from orderedstream.core.sparkcompat import to_arrow_schema_utc

    return to_arrow_schema_utc(spark_schema)


def evolve(table: pa.Schema | None, batch: pa.Schema, where: str,
           partition_by: tuple[str, ...] = ()) -> pa.Schema:
    """The table schema after appending a batch of ``batch`` schema, or SchemaMismatchError.

    Accepted: the same columns with the same types (order may differ), plus new nullable
    columns (appended at the end). Refused: a missing column, a changed type, a new
    non-nullable column. ``partition_by`` columns must exist in the batch.
    """
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
