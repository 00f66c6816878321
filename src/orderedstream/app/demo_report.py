"""What the demo prints at its end: a few rebuilt session tables and copy-paste commands that
query the output (DuckDB, Polars, Spark) and read the state, after the demo has exited.

The output table is read as whatever format the job wrote: a Delta table (``_delta_log/``,
read with delta-rs, which lists only committed files) or the pack's fenced Parquet table
(read through its commit log, ``FencedTable``; Spark reads it through ``_spark_metadata``).
Either way a reader counts only committed rows, never files of failed attempts.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa


def output_format(path: Path) -> str:
    """The format of the output table at ``path``.

    Parameters
    ----------
    path
        The output table's local folder.

    Returns
    -------
    str
        ``"delta"`` when ``path`` holds a Delta log, else ``"parquet"`` (fenced Parquet)."""
    return "delta" if (Path(path) / "_delta_log").is_dir() else "parquet"


def read_output(path: Path) -> pa.Table:
    """The committed rows of the output table at ``path``, Delta or fenced Parquet.

    Parameters
    ----------
    path
        The output table's local folder.

    Returns
    -------
    pyarrow.Table
        Every committed row; files of failed attempts are not read."""
    if output_format(path) == "delta":
        from orderedstream.sinks.deltalog import DeltaOutput

        return DeltaOutput(str(path)).to_arrow()
    from orderedstream.sinks.table import FencedTable

    return FencedTable(str(path)).to_arrow()


def rebuilt_tables(table: pa.Table, sessions: int = 3, rows: int = 5,
                   ) -> list[tuple[str, list[tuple[str, str]], int]]:
    """The first sessions that ended, each rebuilt from its ``final`` snapshot rows.

    Parameters
    ----------
    table
        The output's rows (:func:`read_output`).
    sessions
        How many sessions, in session order.
    rows
        How many rows of each, in row-number order.

    Returns
    -------
    list of tuple
        ``(session, [(row, values), ...], total rows)`` per session."""
    finals = [r for r in table.select(["kind", "op", "session", "row", "values"]).to_pylist()
              if r["kind"] == "snapshot" and r["op"] == "final"]
    by_session: dict[str, list[tuple[str, str]]] = {}
    for r in finals:
        by_session.setdefault(r["session"], []).append((r["row"], r["values"]))
    out = []
    for session in sorted(by_session)[:sessions]:
        entries = sorted(by_session[session], key=lambda e: _row_number(e[0]))
        out.append((session, entries[:rows], len(entries)))
    return out


def _row_number(row: str) -> tuple[int, str]:
    digits = "".join(ch for ch in str(row) if ch.isdigit())
    return (int(digits) if digits else 0, str(row))


def print_tables(table: pa.Table, out: Callable[[str], None]) -> None:
    """Print the output's row counts by kind and a few rebuilt session tables (row id ->
    values, long values cut).

    Parameters
    ----------
    table
        The output's rows (:func:`read_output`).
    out
        Where each line goes (e.g. ``print``)."""
    counts: dict[str, int] = {}
    for kind in table.column("kind").to_pylist():
        counts[kind] = counts.get(kind, 0) + 1
    out("[demo] output rows by kind: "
        + ", ".join(f"{k} {n:,}" for k, n in sorted(counts.items())))
    for session, entries, total in rebuilt_tables(table):
        out(f"[demo] session {session}: rebuilt table, {total} rows (first {len(entries)}):")
        out(f"         {'row':<8} values")
        for row, values in entries:
            shown = values if len(values) <= 60 else values[:57] + "..."
            out(f"         {row:<8} {shown}")


def commands(workdir: Path, state_url: str, storage_options: dict[str, Any]) -> list[str]:
    """Copy-paste commands that query the output (DuckDB, Polars, Spark) and read the state
    after the demo exited; they work as the output is on local disk.

    Parameters
    ----------
    workdir
        The demo's work folder (its ``output/`` is the table).
    state_url
        The state location on the embedded S3.
    storage_options
        The embedded S3's storage options (its endpoint and credentials).

    Returns
    -------
    list of str
        Shell lines, comments (``#``) between the commands."""
    output = workdir / "output"
    py = shlex.quote(sys.executable)
    fmt = output_format(output)
    path = json.dumps(str(output))  # a double-quoted Python string literal
    if fmt == "delta":
        # DuckDB's own Parquet reader over exactly the committed files (delta-rs names them):
        # to_pyarrow_table() here can abort the command at exit (see sinks/deltalog.py).
        load = (f"from deltalake import DeltaTable; t = duckdb.read_parquet("
                f"DeltaTable({path}).file_uris(), hive_partitioning=True)")
        polars = f"import polars as pl; df = pl.read_delta({path})"
        # The committed files only; basePath keeps the kind/site/date partition columns.
        spark = (f"from deltalake import DeltaTable; df = spark.read.option(\"basePath\", "
                 f"{path}).parquet(*DeltaTable({path}).file_uris())")
    else:
        load = (f"from orderedstream.sinks.table import FencedTable; "
                f"t = FencedTable({path}).to_arrow()")
        polars = (f"import polars as pl; from orderedstream.sinks.table import FencedTable; "
                  f"df = pl.from_arrow(FencedTable({path}).to_arrow())")
        spark = f"df = spark.read.parquet({path})"
    sql = json.dumps("select kind, count(*) as n from t group by kind order by kind")
    endpoint = (storage_options.get("client_kwargs") or {}).get("endpoint_url", "")
    state_cmd = (f"from orderedstream.app.demo_report import show_state; "
                 f"show_state({json.dumps(str(workdir))})")
    duck = f"import duckdb; {load}; print(duckdb.sql({sql}))"
    pol = f'{polars}; print(df.group_by("kind").len().sort("kind"))'
    spk = ("from pyspark.sql import SparkSession; "
           'spark = SparkSession.builder.master("local[1]")'
           '.config("spark.ui.showConsoleProgress", "false").getOrCreate(); '
           f'{spark}; df.groupBy("kind").count().orderBy("kind").show()')
    kind = "Delta" if fmt == "delta" else "fenced Parquet"
    rocks = state_command(output, state_url, storage_options)
    return [
        f"# the output table ({kind}) is on local disk: {output}",
        "# DuckDB:",
        f"{py} -c {shlex.quote(duck)}",
        "# Polars:",
        f"{py} -c {shlex.quote(pol)}",
        "# Spark (pyspark is in the same Python environment):",
        f"{py} -c {shlex.quote(spk)}",
        f"# state ({state_url}) lives on the embedded S3 ({endpoint}): start it first with",
        f"#   orderedstream services --workdir {shlex.quote(str(workdir))}",
        "# then, in another terminal, the state as of the last committed batch with Spark",
        "# (format(\"rocksstate\"); option batchId=N for an earlier batch):",
        f"{py} -c {shlex.quote(rocks)}",
        "# or a few keys per partition in plain Python:",
        f"{py} -c {shlex.quote(state_cmd)}",
    ]


def state_command(output: Path, state_url: str, storage_options: dict[str, Any]) -> str:
    """Python source that reads the ordered stage's state with ``format("rocksstate")``: the
    versions the output table's last commit names, from the state location on S3.

    Parameters
    ----------
    output
        The output table's folder (its last commit names the state versions).
    state_url
        The state location.
    storage_options
        The storage options for ``state_url``.

    Returns
    -------
    str
        One line of Python, for ``python -c``."""
    storage = json.dumps(json.dumps(storage_options, sort_keys=True))
    # The JVM starts Python workers with $PYSPARK_PYTHON: this venv's, where the source is.
    return ("import os, sys; from pyspark.sql import SparkSession; "
            'os.environ.setdefault("PYSPARK_PYTHON", sys.executable); '
            'spark = SparkSession.builder.master("local[1]")'
            '.config("spark.ui.showConsoleProgress", "false").getOrCreate(); '
            'spark.sparkContext.setLogLevel("ERROR"); '
            f'df = spark.read.format("rocksstate").option("path", {json.dumps(state_url)})'
            f'.option("table", {json.dumps(str(output))}).option("storage_options", {storage})'
            ".load(); "
            'df.groupBy("topic", "partition", "batch_id", "version").count()'
            '.orderBy("topic", "partition").show(); '
            'df.select("topic", "partition", "key_str", "value").show(5, truncate=70)')


def show_state(workdir: str | Path, partitions: int = 2, keys: int = 3,
               out: Callable[[str], None] = print) -> None:
    """Print a few keys of the demo's state (needs ``orderedstream services --workdir`` up):
    the state versions the last committed batch names, read from the embedded S3.

    Parameters
    ----------
    workdir
        The demo's work folder (its ``demo.json`` and ``services.json`` are read).
    partitions
        How many Kafka partitions to show.
    keys
        How many keys of each.
    out
        Where each line goes.

    Raises
    ------
    OSError
        The folder holds no ``demo.json`` or ``services.json`` (no demo ran there)."""
    from orderedstream.app.job.pipeline import JobOptions, make_processor
    from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY, s3_storage_options

    root = Path(workdir).absolute()
    info = json.loads((root / "demo.json").read_text())
    ports = json.loads((root / "services.json").read_text())
    storage = s3_storage_options(f"http://127.0.0.1:{ports['s3'][0]}", key=ACCESS_KEY,
                                 secret=SECRET_KEY)
    processor = make_processor(JobOptions(
        bootstrap="", output=str(root / "output"), state_location=info["state"],
        checkpoint=str(root / "checkpoint"), storage_options=storage))
    states = processor.partition_states()
    out(f"state at {info['state']}: {len(states)} Kafka partitions, "
        f"{sum(int(b.num_keys or 0) for b in states.values())} keys")
    for pid in sorted(states)[:partitions]:
        topic, number = pid.rpartition("/")[0], int(pid.rpartition("/")[2])
        out(f"{pid} (version {states[pid].version}, {states[pid].num_keys} keys):")
        for n, (key, value) in enumerate(processor.read_state(topic, number)):
            if n >= keys:
                break
            out(f"  {key!r}: {str(value)[:100]}")
