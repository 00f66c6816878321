"""Checks on a finished main job's output and state, shared by every mode that runs it: its
batches replay identically (``replay``, the API and the CLI), and ``format("rocksstate")``
reads the state a batch committed as ``StateInspector`` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from orderedstream.sinks.deltalog import open_batch_log
from orderedstream.statestore.ordered.plan import EXTRA_KEY, bases_from_extra
from orderedstream.statestore.ordered.replay import replay
from orderedstream.statestore.ordered.state_inspect import StateInspector
from orderedstream.statestore.ordered.state_source import json_text
from tests.fixtures import unique


def assert_replays(*, bootstrap: str, output: str, state: str, checkpoint: str,
                   storage_options: dict[str, str], scratch: Path,
                   endpoint: list[str], env: dict[str, str] | None = None) -> None:
    """Every batch of every Kafka partition replays identically (one range per partition
    through the API); the first partition's first batch also through ``orderedstream replay``
    with ``endpoint`` (the store's endpoint flag and URL, or nothing) and ``env``."""
    log = open_batch_log(output, storage_options)
    latest = log.latest()
    assert latest is not None and latest >= 1
    tasks = {b: log.get(b).extra[EXTRA_KEY]["tasks"] for b in range(latest + 1)}
    first_batch = {pid: min(b for b in tasks if pid in tasks[b])
                   for b_tasks in tasks.values() for pid in b_tasks}
    assert len(first_batch) >= 2, first_batch
    replayed = 0
    for pid, first in sorted(first_batch.items()):
        topic, _, number = pid.rpartition("/")
        result = replay(output=output, state=state, checkpoint=checkpoint, topic=topic,
                        partition=int(number), first=first, last=latest,
                        bootstrap_servers=bootstrap, storage_options=storage_options,
                        scratch=str(scratch / unique("api")))
        assert result.identical, (pid, result.output.first, result.state.first)
        assert result.batches and all(b.replayed_rows == b.committed_rows for b in result.batches)
        replayed += sum(b.replayed_rows for b in result.batches)
    assert replayed > 0
    pid, first = sorted(first_batch.items())[0]
    done = subprocess.run(
        [sys.executable, "-m", "orderedstream.app.cli", "replay", "--bootstrap-servers",
         bootstrap, *endpoint, "--output", output, "--state", state, "--checkpoint", checkpoint,
         "--batch", str(first), "--partition", pid.replace("/", ":"),
         "--scratch", str(scratch / unique("cli"))],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "identical", done.stdout


def state_batch(output: str, storage_options: dict[str, str]) -> int:
    """The first batch whose committed state holds keys (ended sessions leave none)."""
    log = open_batch_log(output, storage_options)
    latest = log.latest()
    assert latest is not None
    return next(b for b in range(latest + 1) if sum(
        int(p.num_keys or 0) for p in bases_from_extra(log.get(b).extra).values()))


def assert_state_rows(rows: list[dict[str, Any]], *, output: str, state: str,
                      storage_options: dict[str, str], batch: int) -> None:
    """``rows`` (``rocksstate`` rows as dicts, ``key`` as bytes) are batch ``batch``'s state:
    one row per key of every partition, each at its partition's version, values equal."""
    inspector = StateInspector(output=output, state=state, storage_options=storage_options)
    bases = inspector.partitions(batch)
    assert len(rows) == sum(int(b.num_keys or 0) for b in bases.values()) > 0
    assert {f"{r['topic']}/{r['partition']}": r["version"] for r in rows} == {
        pid: b.version for pid, b in bases.items() if b.num_keys}
    assert {r["batch_id"] for r in rows} == {batch}
    for row in rows:
        kv = inspector.value(row["topic"], row["partition"], row["key"], batch)
        assert kv.exists and json_text(kv.value) == row["value"]
