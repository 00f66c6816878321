"""``orderedstream replay`` / ``state`` on the main job's output, against real Kafka, S3 and
Spark: a multi-batch run with dead letters and processing-time timeouts (including a
timeouts-only task), replayed unchanged (identical for every batch and partition), with a
function changed on purpose (the expected diff), and after retention removed offsets."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from orderedstream.app.job.pipeline import JobOptions, start_job
from orderedstream.core.errors import OptionError
from orderedstream.sinks.deltalog import BatchLog, DeltaOutput, open_batch_log
from orderedstream.statestore.ordered.plan import EXTRA_KEY
from orderedstream.statestore.ordered.replay import replay
from tests.fixtures import unique
from tests.job.replay_logic import IDLE_TIMEOUT

ROOT = Path(__file__).resolve().parents[2]


def _send(bootstrap: str, topic: str, records: list[tuple[int, str | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, key, value in records:
        producer.produce(topic, value=value, key=None if key is None else key.encode(),
                         partition=partition)
    assert producer.flush(30) == 0


def _session(partition: int, session: str, site: str, updates: int, end: bool,
             ) -> list[tuple[int, str | None, bytes]]:
    now = int(time.time() * 1000)
    out = [{"type": "snapshot", "session": session, "site": site, "seq": 0, "ts": now,
            "rows": {"r0": {"v": 0}, "r1": {"v": 1}}}]
    for i in range(1, updates + 1):
        out.append({"type": "update" if i % 3 else "insert", "session": session, "site": site,
                    "seq": i, "ts": now + i, "row": f"r{i % 4}", "values": {"v": i}})
    if end:
        out.append({"type": "end", "session": session, "site": site, "seq": updates + 1,
                    "ts": now + updates + 1})
    return [(partition, session, json.dumps(m).encode()) for m in out]


def _wave(partitions: list[int], tag: str, site: str) -> list[tuple[int, str | None, bytes]]:
    records: list[tuple[int, str | None, bytes]] = []
    for p in partitions:
        sessions = [_session(p, f"{tag}-p{p}-s{i}", site, 5 + i, end=(i == 2)) for i in range(3)]
        for step in range(max(len(s) for s in sessions)):  # sessions interleave
            records += [s[step] for s in sessions if step < len(s)]
        records.append((p, f"{tag}-bad", b"not json {"))                    # bad_json
        records.append((p, f"{tag}-ghost", json.dumps(                       # no_snapshot
            {"type": "update", "session": f"{tag}-ghost", "site": site, "seq": 3,
             "ts": int(time.time() * 1000), "row": "r1", "values": {"v": 9}}).encode()))
    return records


@pytest.fixture(scope="module")
def job_run(spark_sessions: Any, kafka: Any, s3: Any,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two runs of the main job: wave 1 on both partitions; after the idle timeout, wave 2 on
    partition 0 only (its idle sessions time out with records; partition 1's only by time)."""
    spark = spark_sessions.get("local")
    prefix = unique("replay")
    site = "sitea"
    topic = f"{prefix}-{site}"
    kafka.create_topic(topic, 2)
    base = s3.url(unique("replayjob"))
    workdir = tmp_path_factory.mktemp("replayjob")
    opts = JobOptions(bootstrap=kafka.bootstrap, output=f"{base}/output",
                      state_location=f"{base}/state", checkpoint=str(workdir / "checkpoint"),
                      topic_pattern=f"{prefix}-.*", storage_options=s3.storage_options,
                      max_offsets_per_trigger=16, idle_timeout=IDLE_TIMEOUT)
    _send(kafka.bootstrap, topic, _wave([0, 1], "w1", site))
    for wave in (None, _wave([0], "w2", site)):
        if wave is not None:
            time.sleep(3)  # past the idle timeout of every wave-1 session
            _send(kafka.bootstrap, topic, wave)
        query, _processor = start_job(spark, opts, once=True)
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    log = open_batch_log(opts.output, s3.storage_options)  # the job's default: Delta
    assert type(log).__name__ == "DeltaBatchLog"
    return {"opts": opts, "topic": topic, "log": log, "s3": s3, "kafka": kafka,
            "workdir": workdir}


def _tasks(log: BatchLog, batch_id: int) -> dict[str, Any]:
    record = log.get(batch_id)
    assert record is not None
    return record.extra[EXTRA_KEY]["tasks"]


def _cli(run: dict[str, Any], *args: str,
         tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``orderedstream ARGS``; a replay gets a ``--scratch`` folder, or with ``tmpdir`` none
    and ``TMPDIR=tmpdir`` (where its default scratch folder goes)."""
    opts, s3 = run["opts"], run["s3"]
    command = [sys.executable, "-m", "orderedstream.app.cli", *args[:1],
               "--s3-endpoint", s3.endpoint, "--output", opts.output, "--state",
               opts.state_location, *args[1:]]
    if args[0] == "replay" and tmpdir is None:  # keep the replayed rows out of the system tmp
        command += ["--scratch", str(run["workdir"] / unique("scratch"))]
    env = {**os.environ, **s3.aws_env(), **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    began = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    # shown with the report of a failing test (and with -s)
    print(f"$ orderedstream {' '.join(args)}  ({time.monotonic() - began:.1f}s, exit "
          f"{done.returncode})\n{done.stdout}")
    return done


def test_commit_records_what_replay_needs(job_run: dict[str, Any]) -> None:
    log = job_run["log"]
    latest = log.latest()
    assert latest is not None and latest >= 3
    section = log.get(latest).extra[EXTRA_KEY]
    assert isinstance(section["processing_time_ms"], int)
    assert section["replay"]["function"] == "orderedstream.app.job.sessions:SessionLogic"
    assert section["replay"]["params"] == {"snapshot_every": 100, "idle_timeout": IDLE_TIMEOUT}
    assert section["replay"]["key_columns"] == ["session"]
    timeouts = [t["timeouts"] for b in range(latest + 1) for t in _tasks(log, b).values()]
    timeouts_only = [t for b in range(latest + 1) for t in _tasks(log, b).values()
                     if t["records"] == 0]
    assert sum(timeouts) > 0 and timeouts_only, "the run must include timeouts"
    for batch_id in range(latest + 1):
        record = log.get(batch_id)
        listed = {p for t in _tasks(log, batch_id).values() for p in t["files"]}
        assert listed == {f.path for f in record.files}


def test_unchanged_function_replays_identically_for_every_batch_and_partition(
        job_run: dict[str, Any], tmp_path: Path) -> None:
    log, opts, topic = job_run["log"], job_run["opts"], job_run["topic"]
    latest = log.latest()
    checked = dead = timeouts = 0
    for batch_id in range(latest + 1):
        for partition in (0, 1):
            result = replay(output=opts.output, state=opts.state_location,
                            checkpoint=opts.checkpoint, topic=topic, partition=partition,
                            first=batch_id, bootstrap_servers=opts.bootstrap,
                            storage_options=opts.storage_options,
                            scratch=str(tmp_path / f"{batch_id}-{partition}"))
            assert result.identical, (batch_id, partition, result.output.first,
                                      result.state.first)
            done = result.batches[0]
            task = _tasks(log, batch_id).get(f"{topic}/{partition}")
            assert done.committed_rows == (task["output_rows"] if task else 0)
            assert done.replayed_rows == done.committed_rows
            assert done.records == (task["records"] if task else 0)
            assert done.timeouts == (task["timeouts"] if task else 0)
            checked += done.replayed_rows
            timeouts += done.timeouts
            if done.scratch_file:
                import pyarrow.parquet as pq

                rows = pq.read_table(done.scratch_file).to_pylist()
                dead += sum(1 for r in rows if r["kind"] == "dead_letter")
    assert checked > 0 and dead == 6 and timeouts > 0


def test_function_runs_in_this_process(job_run: dict[str, Any], tmp_path: Path) -> None:
    """What makes breakpoint() and debuggers work: the user function is called here."""
    from orderedstream.app.job.sessions import SessionLogic

    log, opts, topic = job_run["log"], job_run["opts"], job_run["topic"]
    calls: list[tuple[int, Any]] = []
    logic = SessionLogic(idle_timeout=IDLE_TIMEOUT)

    def traced(key: Any, record: Any, state: Any) -> Any:
        calls.append((os.getpid(), None if record is None else record["offset"]))
        return logic(key, record, state)

    task = _tasks(log, 0)[f"{topic}/0"]
    result = replay(output=opts.output, state=opts.state_location, checkpoint=opts.checkpoint,
                    topic=topic, partition=0, first=0, bootstrap_servers=opts.bootstrap,
                    function=traced, storage_options=opts.storage_options,
                    scratch=str(tmp_path))
    assert result.identical
    assert [offset for _, offset in calls] == list(range(task["first_offset"],
                                                         task["last_offset"] + 1))
    assert {pid for pid, _ in calls} == {os.getpid()}


def test_cli_replay_is_identical(job_run: dict[str, Any]) -> None:
    log, opts, topic = job_run["log"], job_run["opts"], job_run["topic"]
    # the batch where partition 1 had only timeouts: the hardest to reproduce
    batch_id = next(b for b in range(log.latest() + 1)
                    if (_tasks(log, b).get(f"{topic}/1") or {}).get("records") == 0)
    done = _cli(job_run, "replay", "--bootstrap-servers", opts.bootstrap, "--checkpoint",
                opts.checkpoint, "--batch", str(batch_id), "--partition", f"{topic}:1")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "identical", done.stdout
    assert not any("differ" in line for line in lines), done.stdout


def test_changed_function_shows_the_expected_diff(job_run: dict[str, Any]) -> None:
    log, opts, topic = job_run["log"], job_run["opts"], job_run["topic"]
    latest = log.latest()
    table = _committed_rows(job_run)
    first_offset = _tasks(log, 0)[f"{topic}/0"]["first_offset"]
    last_offset = max(t["last_offset"] for b in range(latest + 1)
                      for p, t in _tasks(log, b).items()
                      if p == f"{topic}/0" and t["last_offset"] is not None)
    mine = [r for r in table if r["partition"] == 0 and r["topic"] == topic
            and first_offset <= r["offset"] <= last_offset]
    updates = sum(1 for r in mine if r["kind"] == "change" and r["op"] == "update")
    dead = sum(1 for r in mine if r["kind"] == "dead_letter")
    assert updates > 0 and dead == 4
    done = _cli(job_run, "replay", "--bootstrap-servers", opts.bootstrap, "--checkpoint",
                opts.checkpoint, "--from", "0", "--to", str(latest), "--partition",
                f"{topic}:0", "--function", "tests.job.replay_logic:changed")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    total = re.search(r"output rows differ: (\d+) added, (\d+) removed, (\d+) changed", out)
    assert total is not None, out
    assert tuple(map(int, total.groups())) == (0, dead, updates), out
    assert re.search(r"key None: 0 added, 4 removed, 0 changed", out), out
    assert "column op: committed 'update' vs replayed 'UPDATE'" in out, out
    assert "state: " in out and "identical to committed version" in out, out
    assert out.splitlines()[-1] == "replay and committed batch differ"


def _committed_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    return (DeltaOutput(run["opts"].output, storage_options=run["s3"].storage_options)
            .to_arrow().select(["kind", "topic", "partition", "offset", "op"]).to_pylist())


def test_state_command_counts_and_shows_history(job_run: dict[str, Any]) -> None:
    log, topic = job_run["log"], job_run["topic"]
    keys = _cli(job_run, "state", "keys")
    assert keys.returncode == 0, keys.stderr[-3000:]
    bases = log.latest_batch_record().extra[EXTRA_KEY]["partitions"]
    expected = sum(int(b["num_keys"] or 0) for b in bases.values())
    assert keys.stdout.splitlines()[-1] == f"total\t{expected} keys"
    # w2-p0-s0 was opened in wave 2: no state before, its table after
    history = _cli(job_run, "state", "history", "--partition", f"{topic}:0",
                   "--key", "w2-p0-s0", "--from", "0")
    assert history.returncode == 0, history.stderr[-3000:]
    lines = history.stdout.splitlines()
    present = [line for line in lines if '"session": "w2-p0-s0"' in line]
    assert lines[0].endswith("(no state)") and present, lines
    # a wave-1 session that timed out: present after wave 1, gone after its timeout
    w1 = _cli(job_run, "state", "history", "--partition", f"{topic}:0", "--key", "w1-p0-s0",
              "--from", "0").stdout.splitlines()
    assert any('"session": "w1-p0-s0"' in line for line in w1) and w1[-1].endswith("(no state)")
    batch_id = present[0].split("\t")[0].split()[1]
    got = _cli(job_run, "state", "get", "--partition", f"{topic}:0", "--key", "w2-p0-s0",
               "--batch", batch_id)
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.strip() == present[0], (got.stdout, present[0])


def _scratch_folders(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob("orderedstream-replay-*"))


def test_default_scratch_is_kept_with_its_output_and_removed_when_refused_or_failed(
        job_run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opts, topic = job_run["opts"], job_run["topic"]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the default scratch goes here
    common = {"output": opts.output, "state": opts.state_location,
              "checkpoint": opts.checkpoint, "topic": topic, "partition": 0, "first": 0,
              "bootstrap_servers": opts.bootstrap, "storage_options": opts.storage_options}

    result = replay(**common)
    assert result.identical
    assert _scratch_folders(tmp_path) == [Path(result.scratch)]
    assert result.batches[0].scratch_file is not None
    assert Path(result.batches[0].scratch_file).is_file()
    assert [p.name for p in Path(result.scratch).iterdir()] == ["output"]  # no state copy
    shutil.rmtree(result.scratch)

    with pytest.raises(OptionError, match="cannot import module"):  # refused
        replay(**common, function="tests.job.no_such_module:logic")
    assert _scratch_folders(tmp_path) == []

    def breaks(key: Any, record: Any, state: Any) -> Any:
        if record is not None and record["offset"] >= 3:
            raise RuntimeError("the user function broke")
        yield from ()

    with pytest.raises(RuntimeError, match="the user function broke"):  # failed midway
        replay(**common, function=breaks)
    assert _scratch_folders(tmp_path) == []

    mine = tmp_path / "mine"  # a folder the user gave is never removed
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(RuntimeError):
        replay(**common, function=breaks, scratch=str(mine))
    assert (mine / "notes.txt").read_text() == "keep"


def test_cli_replay_says_where_its_kept_output_is(job_run: dict[str, Any],
                                                   tmp_path: Path) -> None:
    opts, topic = job_run["opts"], job_run["topic"]
    done = _cli(job_run, "replay", "--bootstrap-servers", opts.bootstrap, "--checkpoint",
                opts.checkpoint, "--batch", "0", "--partition", f"{topic}:0", tmpdir=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [scratch] = _scratch_folders(tmp_path)
    assert f"replayed output: {scratch / 'output'} (a temp folder, kept: delete {scratch} " \
           "when done)" in done.stdout
    assert list((scratch / "output").glob("batch=0/*.parquet"))
    refused = _cli(job_run, "replay", "--bootstrap-servers", opts.bootstrap, "--checkpoint",
                   opts.checkpoint, "--batch", "0", "--partition", f"{topic}:0",
                   "--function", "nosuchmodule:logic", tmpdir=tmp_path)
    assert refused.returncode == 2 and "nosuchmodule" in refused.stderr, refused.stderr
    assert _scratch_folders(tmp_path) == [scratch]  # only the kept one


def test_retention_removed_offsets_give_a_clear_error(job_run: dict[str, Any],
                                                       tmp_path: Path) -> None:
    """Runs last: deletes the start of partition 0."""
    opts, topic, log = job_run["opts"], job_run["topic"], job_run["log"]
    end = _tasks(log, 0)[f"{topic}/0"]["last_offset"] + 1
    admin = AdminClient({"bootstrap.servers": opts.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, end)]).values():
        future.result(30)
    done = _cli(job_run, "replay", "--bootstrap-servers", opts.bootstrap, "--checkpoint",
                opts.checkpoint, "--batch", "0", "--partition", f"{topic}:0", tmpdir=tmp_path)
    assert done.returncode != 0, done.stdout
    assert _scratch_folders(tmp_path) == [], "a failed replay leaves no scratch folder"
    assert "are no longer in Kafka" in done.stderr, done.stderr[-3000:]
    assert f"topic '{topic}' partition 0" in done.stderr
    assert f"[0, {end})" in done.stderr and f"now starts at offset {end}" in done.stderr
    # partition 1 kept its records: still replays
    ok = _cli(job_run, "replay", "--bootstrap-servers", opts.bootstrap, "--checkpoint",
              opts.checkpoint, "--batch", "0", "--partition", f"{topic}:1")
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1] == "identical", ok.stdout
