"""``orderedstream table history|compact|vacuum|verify`` run as a user would (a subprocess),
on a Delta table on real S3 (SeaweedFS, credentials from the AWS environment) and on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from typing import Any

from deltalake import DeltaTable

from orderedstream.sinks.deltacommit import DeltaCommitter
from orderedstream.sinks.deltafiles import delta_storage_options
from orderedstream.sinks.options import FencedParquetOptions
from orderedstream.sinks.writer import write_parquet_files
from tests.sinks.test_delta import commit, rows


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orderedstream.app.cli", "table", *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_table_cli_history_compact_vacuum_verify(target, request: Any) -> None:
    url, opts = target("cli")
    extra: list[str] = []
    env: dict[str, str] = {}
    if url.startswith("s3://"):
        s3 = request.getfixturevalue("s3")
        extra, env = ["--s3-endpoint", s3.endpoint], s3.aws_env()
    elif url.startswith("az://"):
        azurite = request.getfixturevalue("azurite")
        extra, env = ["--azure-endpoint", azurite.endpoint], azurite.azure_env()
    options = replace(FencedParquetOptions.from_mapping(
        {"path": url, "storageOptions": opts, "partitionBy": "day"}), file_stats=True)
    committer = DeltaCommitter(options, app_id="cli")
    for batch in range(4):
        commit(committer, batch, batch * 100, 100, {"t/0": [batch * 100, batch * 100 + 100]})
    write_parquet_files([rows(10_000, 50)], options, "crashed")  # an attempt never committed

    history = cli("history", url, *extra, env=env)
    assert history.returncode == 0, history.stderr
    # the sink commands (fenced Parquet) refuse a Delta table, naming the commands that fit
    sink = subprocess.run([sys.executable, "-m", "orderedstream.app.cli", "sink", "batches",
                           url, *extra], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert sink.returncode == 2 and sink.stderr.startswith(
        f"orderedstream: UnsupportedFormatError: {url} is a Delta table"), sink.stderr
    assert "orderedstream table history" in sink.stderr and not sink.stdout
    lines = history.stdout.splitlines()
    assert len(lines) == 5 and "t/0:[300,400)" in lines[-1] and " 3 " in lines[-1]
    verified = cli("verify", url, *extra, env=env)
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["rows"] == 400 and report["problems"] == []
    assert report["writers"] == {"cli": {"batches": 4, "latest": 3}}
    assert report["unreferenced_files"] == 2  # the crashed attempt's two partition files
    compacted = cli("compact", url, "--target-file-size", "64MB", *extra, env=env)
    assert compacted.returncode == 0, compacted.stderr
    assert json.loads(compacted.stdout)["files_removed"] == 8
    table = DeltaTable(url, storage_options=delta_storage_options(url, opts))
    assert table.to_pyarrow_table().num_rows == 400 and len(table.file_uris()) == 2
    # the stream keeps committing after the compaction, on the same log
    commit(committer, 4, 400, 100, {"t/0": [400, 500]})
    assert DeltaTable(url, storage_options=delta_storage_options(url, opts)
                      ).to_pyarrow_table().num_rows == 500
    dry = cli("vacuum", url, "--retention-hours", "1", "--dry-run", *extra, env=env)
    assert dry.returncode == 0 and dry.stdout.startswith("would delete 0 files"), dry.stdout
    for bad in (("history", url, "--limit", "0"), ("compact", url, "--retries", "0")):
        refused = cli(*bad, *extra, env=env)
        assert refused.returncode == 2 and f"argument {bad[2]}: must be 1 or more" in \
            refused.stderr, refused.stderr
    short = cli("vacuum", url, "--retention-hours", "0", *extra, env=env)
    assert short.returncode == 2 and "OptionError: --retention-hours 0" in short.stderr
    bad = cli("verify", f"{url}-missing", *extra, env=env)
    assert bad.returncode == 2 and "OptionError" in bad.stderr and "not a Delta table" in bad.stderr
