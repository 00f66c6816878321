"""CPU per tiny Parquet file (45 rows of the main job's output columns) by codec and option
(session 24): ``.venv/bin/python benchmarks/results/20261127-s24/pqbench.py``. The stage
writes 2.35 such files per Kafka partition and batch in the small-batch case."""

from __future__ import annotations

import io
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orderedstream.app.job.sessions import OUTPUT_SCHEMA, PARTITION_BY

ROWS = 45


def _table() -> pa.Table:
    schema = pa.schema([f for f in OUTPUT_SCHEMA if f.name not in PARTITION_BY])
    columns: dict[str, pa.Array] = {}
    for field in schema:
        if pa.types.is_string(field.type):
            columns[field.name] = pa.array([f"v{field.name}-{i % 7}-xxxxxxxxxxxxxxxx"
                                            for i in range(ROWS)])
        elif pa.types.is_integer(field.type):
            columns[field.name] = pa.array(range(1000, 1000 + ROWS), field.type)
        else:
            columns[field.name] = pa.nulls(ROWS, field.type)
    return pa.table(columns, schema=schema)


def run(table: pa.Table, label: str, **options: Any) -> None:
    best = []
    for _ in range(5):
        began = time.process_time()
        for _ in range(300):
            out = io.BytesIO()
            writer = pq.ParquetWriter(out, table.schema, **options)
            writer.write_table(table, row_group_size=1_000_000)
            writer.close()
        best.append((time.process_time() - began) / 300 * 1e3)
    print(f"{label:34s} {min(best):.3f} ms CPU per file, {len(out.getvalue())} bytes")


def main() -> None:
    table = _table()
    run(table, "zstd (the sink's default)", compression="zstd")
    run(table, "zstd, no statistics", compression="zstd", write_statistics=False)
    run(table, "zstd, no dictionary", compression="zstd", use_dictionary=False)
    run(table, "zstd, no Arrow schema", compression="zstd", store_schema=False)
    run(table, "snappy (Spark's default)", compression="snappy")
    run(table, "uncompressed", compression=None)


if __name__ == "__main__":
    main()
