"""Spark's reused Python workers collect garbage after every task; the sinks' writer freezes
the worker's long-lived heap first, so those collections skip it. Only in Spark's workers."""

from __future__ import annotations

import gc
import importlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orderedstream.core.workerheap import (
    freeze_worker_heap,
    in_reused_worker,
    release_freed_memory,
)


def test_a_writing_task_freezes_its_workers_heap_and_writes_the_same_rows(spark: Any,
                                                                          tmp_path: Path) -> None:
    out = tmp_path / "table"

    def task(batches: Any) -> Any:
        import gc as worker_gc
        import json as worker_json

        from orderedstream.core.workerheap import in_reused_worker as reused
        from orderedstream.sinks.options import FencedParquetOptions
        from orderedstream.sinks.writer import task_attempt_id, write_parquet_files

        files = write_parquet_files(batches, FencedParquetOptions.from_mapping(
            {"path": str(out)}), task_attempt_id())
        yield pa.RecordBatch.from_pydict({"report": [worker_json.dumps({
            "reused": reused(), "frozen": worker_gc.get_freeze_count(),
            "tracked": len(worker_gc.get_objects()),
            "rows": sum(f.rows for f in files),
            "paths": [f.path for f in files]})]})

    frame = spark.range(0, 20_000, numPartitions=2).selectExpr("id", "cast(id % 7 as int) k")
    reports = [json.loads(r["report"]) for r in
               frame.mapInArrow(task, "report string").collect()]
    assert len(reports) == 2
    for report in reports:
        assert report["reused"] is True
        # the heap alive when the task started (pyarrow, pyspark, ...) is frozen: the
        # daemon's collection after the task walks only what the task added and kept
        assert report["frozen"] > 20_000
        assert report["tracked"] < report["frozen"]
    assert sum(r["rows"] for r in reports) == 20_000
    written = pa.concat_tables(pq.read_table(out / p) for r in reports for p in r["paths"])
    assert sorted(written["id"].to_pylist()) == list(range(20_000))
    assert written.column_names == ["id", "k"]


def test_outside_a_reused_spark_worker_nothing_is_frozen(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    before = gc.get_freeze_count()
    assert in_reused_worker() is False  # this test process is no Spark worker
    assert freeze_worker_heap() is False
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")  # the variable alone is not enough,
    importlib.import_module("pyspark.daemon")  # nor importing the daemon (as other tests do)
    assert freeze_worker_heap() is False
    monkeypatch.setenv("SPARK_REUSE_WORKER", "")
    assert in_reused_worker() is False
    assert gc.get_freeze_count() == before


def test_this_c_library_can_trim() -> None:
    """Linux with glibc, as CI and the services run: the readers' trim after a large range
    (what it gives back: ``scripts/bench --only readerheap``); off without process tuning."""
    assert release_freed_memory() is True  # the suite runs with ORDEREDSTREAM_PROCESS_TUNING=1


def test_without_process_tuning_nothing_is_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORDEREDSTREAM_PROCESS_TUNING", raising=False)
    assert release_freed_memory() is False
