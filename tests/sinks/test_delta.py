"""Delta output's commit path on local disk and real S3 (SeaweedFS), without Spark: one
Delta commit per batch, replays, a second checkpoint refused, racing committers, schema
evolution, and every reader counting exactly the committed rows beside orphan files."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from orderedstream.core.errors import CommitConflictError, SchemaMismatchError
from orderedstream.sinks.deltacommit import DeltaCommitter, DeltaPrepared
from orderedstream.sinks.deltafiles import delta_storage_options
from orderedstream.sinks.deltalog import DeltaBatchLog, open_batch_log
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.writer import write_parquet_files


def rows(start: int, n: int, *, extra: bool = False) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    data = {"id": ids, "day": pc.cast(pc.bit_wise_and(ids, 1), pa.int32()),
            "name": pa.array([f"n{i}" for i in range(start, start + n)])}
    if extra:
        data["note"] = pa.array(["x"] * n)
    return pa.RecordBatch.from_pydict(data)


def options(url: str, opts: dict) -> FencedParquetOptions:
    return replace(FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "partitionBy": "day"}), file_stats=True)


def commit(committer: DeltaCommitter, batch_id: int, start: int, n: int,
           offsets: dict[str, list[int]], **kw: bool) -> object:
    batch = rows(start, n, **kw)
    prepared = committer.prepare(batch_id, batch.schema, lambda: offsets)
    if not isinstance(prepared, DeltaPrepared):
        return prepared
    files = write_parquet_files([batch], committer.options, f"b{batch_id}")
    return committer.publish(prepared, files, offsets=offsets,
                             extra={"ordered_state": {"partitions": {"t/0": {"version": batch_id}}},
                                    "processing_time_ms": 7})


def count_everywhere(url: str, opts: dict) -> dict[str, int]:
    storage = delta_storage_options(url, opts)
    table = DeltaTable(url, storage_options=storage)
    dataset = table.to_pyarrow_dataset()  # noqa: F841 - DuckDB scans the Python variable
    return {
        "delta-rs": table.to_pyarrow_table().num_rows,
        "polars": pl.read_delta(url, storage_options=storage or None).height,
        "duckdb": duckdb.sql("select count(*) from dataset").fetchall()[0][0],
    }


def test_one_commit_per_batch_replay_and_readers(target) -> None:
    url, opts = target("delta")
    committer = DeltaCommitter(options(url, opts), app_id="sessions")
    offsets = {0: {"t/0": [0, 100]}, 1: {"t/0": [100, 250]}}
    first = commit(committer, 0, 0, 100, offsets[0])
    second = commit(committer, 1, 100, 150, offsets[1])
    table = DeltaTable(url, storage_options=delta_storage_options(url, opts))
    assert table.version() == 1 and table.transaction_version("sessions") == 1
    assert {f.rows for f in first.files} == {50} and second.rows == 150  # type: ignore[attr-defined]
    # the batch log API the stage, retention and replay use
    log = open_batch_log(url, opts)
    assert isinstance(log, DeltaBatchLog)
    record = log.get(1)
    assert record is not None and record.batch_id == 1 and record.rows == 150
    assert record.extra == {"ordered_state": {"partitions": {"t/0": {"version": 1}}},
                            "processing_time_ms": 7}
    assert log.latest() == 1 and log.latest_batch_record().version == 1  # type: ignore[union-attr]
    assert all(f.stats and f.stats["numRecords"] == f.rows for f in record.files)
    assert {f.partition["day"] for f in record.files} == {"0", "1"}
    # a replay with the same offsets is skipped (nothing written, no new version)
    again = commit(committer, 1, 100, 150, offsets[1])
    assert again == record or getattr(again, "version", None) == 1
    assert DeltaTable(url, storage_options=delta_storage_options(url, opts)).version() == 1
    # a second checkpoint's batch 1 covers other offsets: refused loudly, never skipped
    other = DeltaCommitter(options(url, opts), app_id="sessions")
    with pytest.raises(CommitConflictError, match=r"batch 1 of .*\[100, 250\).*\[0, 40\)"):
        commit(other, 1, 0, 40, {"t/0": [0, 40]})
    # an aborted attempt's files sit in the folder: every reader counts the committed rows
    prepared = committer.prepare(2, rows(0, 1).schema, lambda: {"t/0": [250, 260]})
    assert isinstance(prepared, DeltaPrepared)
    orphans = write_parquet_files([rows(10_000, 999)], committer.options, "crashed")
    assert orphans and sum(f.rows for f in orphans) == 999
    assert count_everywhere(url, opts) == {"delta-rs": 250, "polars": 250, "duckdb": 250}


def test_schema_evolution_and_refusals(target) -> None:
    url, opts = target("evolve")
    committer = DeltaCommitter(options(url, opts), app_id="w")
    commit(committer, 0, 0, 10, {"t/0": [0, 10]})
    commit(committer, 1, 10, 10, {"t/0": [10, 20]}, extra=True)  # new nullable column: added
    table = DeltaTable(url, storage_options=delta_storage_options(url, opts))
    got = table.to_pyarrow_table()
    assert "note" in got.column_names and got.num_rows == 20
    assert got.filter(pc.is_null(got["note"])).num_rows == 10
    changed = pa.schema([("id", pa.string()), ("day", pa.int32()), ("name", pa.string())])
    before = table.version()
    with pytest.raises(SchemaMismatchError, match="changed type"):
        committer.prepare(2, changed, dict)
    other = DeltaCommitter(replace(options(url, opts), partition_by=()), app_id="w")
    with pytest.raises(SchemaMismatchError, match="partition"):
        other.prepare(2, rows(0, 1).schema, dict)
    assert DeltaTable(url, storage_options=delta_storage_options(url, opts)).version() == before


@pytest.mark.parametrize("trial", range(6))
def test_racing_committers_exactly_one_wins(s3_table, trial: int) -> None:
    """Even trials race for batch 1 of an existing table, odd ones for batch 0 of a table
    that does not exist yet (the race to create it)."""
    url, opts = s3_table(f"race{trial}")
    batch_id = 1 if trial % 2 == 0 else 0
    if batch_id == 1:
        commit(DeltaCommitter(options(url, opts), app_id="q"), 0, 0, 10, {"t/0": [0, 10]})
    offsets = {"t/0": [10, 30]}
    committers = [DeltaCommitter(options(url, opts), app_id="q") for _ in range(8)]
    prepared = [c.prepare(batch_id, rows(0, 1).schema, lambda: offsets) for c in committers]
    files = [write_parquet_files([rows(100 * i, 20)], c.options, f"r{i}")
             for i, c in enumerate(committers)]
    outcomes: list[object] = [None] * 8
    start = threading.Barrier(8)

    def run(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = committers[i].publish(prepared[i], files[i], offsets=offsets)  # type: ignore[arg-type]
        except CommitConflictError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if not isinstance(o, CommitConflictError)]
    assert len(winners) == 1, outcomes
    assert sum(isinstance(o, CommitConflictError) for o in outcomes) == 7
    table = DeltaTable(url, storage_options=delta_storage_options(url, opts))
    assert table.version() == batch_id
    assert table.to_pyarrow_table().num_rows == 10 * batch_id + 20
    assert table.transaction_version("q") == batch_id
    log = DeltaBatchLog(url, opts)
    assert [r.batch_id for r in log.records()] == list(range(batch_id + 1))


def test_the_log_cache_keeps_the_most_recently_used_versions(target) -> None:
    """A driver that commits for days keeps ``cache_entries`` parsed versions, the most
    recently used, and still reads every version in order."""
    url, opts = target("delta-cache")
    committer = DeltaCommitter(options(url, opts), app_id="sessions")
    for batch in range(8):
        commit(committer, batch, batch * 10, 10, {"t/0": [batch * 10, batch * 10 + 10]})
    log = DeltaBatchLog(url, opts, writer_id="sessions", cache_entries=3)
    assert [r.batch_id for r in log.records()] == list(range(8))
    assert len(log._cache) == 3  # noqa: SLF001 - the bound under test
    log.read_version(0)
    log.read_version(7)  # a hit: used last
    log.read_version(3)
    assert list(log._cache) == [0, 7, 3]  # noqa: SLF001 - 5 and 6 dropped, oldest use first
    assert log.get(7).rows == 10 and log.get(0).rows == 10  # type: ignore[union-attr]
    assert len(log._cache) == 3  # noqa: SLF001


def test_new_versions_are_seen_despite_cached_listings(s3_table) -> None:
    """fsspec shares one s3fs instance per process and s3fs answers cat_file from a cached
    listing of the folder: the batch log must still see versions committed after it."""
    url, opts = s3_table("listing")
    committer = DeltaCommitter(options(url, opts), app_id="w")
    commit(committer, 0, 0, 10, {"t/0": [0, 10]})
    log = DeltaBatchLog(url, opts, writer_id="w")
    assert log.latest() == 0
    log.fs.ls(log.log_dir)  # someone in this process lists the log folder (cached)
    commit(DeltaCommitter(options(url, opts), app_id="w"), 1, 10, 10, {"t/0": [10, 20]})
    fresh = DeltaBatchLog(url, opts, writer_id="w")
    log.fs.ls(log.log_dir)
    assert log.latest() == 1 and fresh.latest() == 1
    assert committer.prepare(1, rows(0, 1).schema, lambda: {"t/0": [10, 20]}).batch_id == 1  # type: ignore[union-attr]


_FIRST_LOOK = """
import json, sys
from orderedstream.sinks.deltalog import DeltaBatchLog
url, opts = json.loads(sys.argv[1])
log = DeltaBatchLog(url, opts, writer_id="w")
missing = DeltaBatchLog(url + "-none", opts, writer_id="w")
print(json.dumps({"latest": log.latest_version(), "batch": log.latest(),
                  "missing": missing.latest_version(), "s3fs": "s3fs" in sys.modules}))
"""


def test_a_drivers_first_look_at_the_log_lists_it_without_s3fs(s3_table) -> None:
    """A job's first batch finds the table's newest version with one listing of its log
    (no ``_last_checkpoint`` yet) through obstore: the driver imports no s3fs for it (0.2-0.3 s
    of batch 0 here). Objects below the log folder are not versions of it."""
    import json

    import fsspec

    url, opts = s3_table("firstlook")
    committer = DeltaCommitter(options(url, opts), app_id="w")
    for batch_id in range(3):
        commit(committer, batch_id, 10 * batch_id, 10, {"t/0": [10 * batch_id, 10 * batch_id + 10]})
    fs = fsspec.filesystem("s3", **opts)
    root = url.removeprefix("s3://")
    assert not fs.exists(f"{root}/_delta_log/_last_checkpoint")
    fs.pipe_file(f"{root}/_delta_log/_staged/00000000000000000009.json", b"{}")  # not a version
    done = subprocess.run([sys.executable, "-c", _FIRST_LOOK, json.dumps([url, opts])],
                          check=True, capture_output=True, text=True, timeout=120)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"latest": 2, "batch": 2, "missing": None, "s3fs": False}, found


def test_file_statistics_are_safe_bounds(tmp_path) -> None:
    """Delta statistics collected while writing: a minimum never above, a maximum never below
    the data (timestamps to milliseconds, long strings, NaN), null counts exact; partition
    values come back raw (Hive escaping undone, null)."""
    import datetime

    from orderedstream.sinks.deltafiles import add_action, partition_values

    stamp = pa.array([datetime.datetime(2024, 1, 1, 0, 0, 0, 1500), None,
                      datetime.datetime(2023, 5, 1, 0, 0, 0, 999)], pa.timestamp("us", tz="UTC"))
    batch = pa.RecordBatch.from_pydict({
        "p": ["a:b", "a:b", None], "x": [3, None, 1], "s": ["zz", "a" * 40, "b" * 40],
        "t": stamp, "f": [1.0, float("nan"), 2.0]})
    opts = replace(FencedParquetOptions.from_mapping(
        {"path": str(tmp_path / "t"), "partitionBy": "p"}), file_stats=True)
    files = {f.partition["p"]: f for f in write_parquet_files([batch], opts, "s")}
    colon, null = files["a%3Ab"], files["__HIVE_DEFAULT_PARTITION__"]
    assert colon.stats == {
        "numRecords": 2, "nullCount": {"x": 1, "s": 0, "t": 1, "f": 0},
        "minValues": {"x": 3, "s": "a" * 32, "t": "2024-01-01T00:00:00.001Z"},
        "maxValues": {"x": 3, "s": "zz", "t": "2024-01-01T00:00:00.002Z"}}  # f: NaN, no bounds
    assert null.stats is not None and "s" not in null.stats["maxValues"]  # 40 chars: no max
    assert null.stats["minValues"]["t"] == "2023-05-01T00:00:00.000Z"
    assert null.stats["maxValues"]["t"] == "2023-05-01T00:00:00.001Z"
    assert partition_values(colon) == {"p": "a:b"} and partition_values(null) == {"p": None}
    action = add_action(colon)
    assert action.path.startswith("p=a%253Ab/") and action.stats.startswith("{")


def test_reading_the_output_then_exiting_never_aborts(tmp_path) -> None:
    """``DeltaOutput.to_arrow()`` in a process that exits right after it (the demo's summary,
    ``orderedstream`` commands): delta-rs's ``to_pyarrow_table()`` left Arrow I/O threads that
    aborted such a process at exit ('terminate called without an active exception') in about
    one run in three on this table; the read is now delta-rs's own engine."""
    url = str(tmp_path / "exit")
    committer = DeltaCommitter(options(url, {}), app_id="w")
    for batch_id in range(3):
        commit(committer, batch_id, batch_id * 40, 40, {"t/0": [batch_id * 40, batch_id * 40 + 40]})
    script = ("import sys; from orderedstream.sinks.deltalog import DeltaOutput; "
              "print(DeltaOutput(sys.argv[1]).to_arrow().num_rows)")
    for run in range(15):
        done = subprocess.run([sys.executable, "-c", script, url], capture_output=True,
                              text=True, timeout=120, check=False)
        assert (done.returncode, done.stdout.strip()) == (0, "120"), \
            f"run {run}: rc {done.returncode}: {done.stderr[-1500:]}"


def test_nulls_in_a_not_null_column_are_refused_before_the_commit(tmp_path) -> None:
    """A table whose first batch made ``name`` NOT NULL took a later batch's nulls and
    committed them (delta-rs does not check add actions): readers then got a non-nullable
    field holding nulls. Refused now from the files' statistics, nothing committed."""
    url = str(tmp_path / "notnull")
    committer = DeltaCommitter(options(url, {}), app_id="w")
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("day", pa.int32()), pa.field("name", pa.string(), False)])

    def write(batch_id: int, names: list[str | None]) -> object:
        batch = pa.RecordBatch.from_pydict(
            {"id": list(range(len(names))), "day": [0] * len(names), "name": names},
            schema=strict.set(2, pa.field("name", pa.string())))
        prepared = committer.prepare(batch_id, strict if batch_id == 0 else batch.schema,
                                     lambda: {"t/0": [batch_id * 10, batch_id * 10 + 2]})
        assert isinstance(prepared, DeltaPrepared)
        files = write_parquet_files([batch], committer.options, f"b{batch_id}")
        return committer.publish(prepared, files, offsets={"t/0": [batch_id * 10,
                                                                  batch_id * 10 + 2]})

    write(0, ["a", "b"])
    table = DeltaTable(url)
    assert not pa.schema(table.schema().to_arrow()).field("name").nullable
    with pytest.raises(SchemaMismatchError, match=r"batch 1 of Delta table .* has nulls in "
                                                  r"NOT NULL columns \(name: 1\)"):
        write(1, ["c", None])
    assert DeltaTable(url).version() == 0 and DeltaTable(url).to_pyarrow_table().num_rows == 2
