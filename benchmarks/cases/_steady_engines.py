"""The steady-rate case's engines: long-lived processes whose phases the case process drives.

The pack's engine is one process (the main job in the plain session of ``orderedstream run
--master local[2]``, process tuning off) that takes commands on its standard input, one JSON
object a line: start a query over a prefix's topics with a trigger interval, stop it, exit.
Quix Streams runs one process per phase (``benchmarks/quix_app.py`` with a flush log). Each
engine's process tree is sampled from the case process (``TreeSampler``), in a cgroup of its
own where the machine allows one. Both expose the same view: the committed position (for
lag) and the commits that made records visible (for latency).
Not a case itself (the leading underscore keeps it out of ``benchmarks.run``'s list).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.cases._cgroup import EngineCgroup, engine_cgroup
from benchmarks.cases._steady_feed import Commit, topic_names
from benchmarks.cases._streaming import ROOT, run_query
from benchmarks.cases._tree import TreeSampler
from benchmarks.common import CaseContext

REPLY = "@@steady "
TUNING_ENV = "ORDEREDSTREAM_PROCESS_TUNING"  # orderedstream.core.tuning.ENV, not imported here


class SampledProcess:
    """A child process in its own cgroup (where possible), sampled by a ``TreeSampler``."""

    def __init__(self, argv: list[str], log: Path, *, stdin: bool = False,
                 cwd: Path = ROOT) -> None:
        self._group_cm = engine_cgroup()
        self.group: EngineCgroup | None = self._group_cm.__enter__()
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._log = open(log, "a")  # noqa: SIM115 - closed in close()
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        self.proc = subprocess.Popen(
            self.group.wrap(argv) if self.group else argv, cwd=cwd, env=env, text=True,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.tree = TreeSampler(self.proc.pid, interval=0.5).__enter__()
        self._reader = threading.Thread(target=self._read, daemon=True, name="engine-output")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                self.replies.put(json.loads(line[len(REPLY):]))
            else:
                self._log.write(line)
                self._log.flush()

    def cpu(self) -> tuple[float | None, dict[str, float]]:
        """CPU so far: the cgroup's exact total (None without one) and the sampled seconds by
        kind of process."""
        exact = self.group.usage_seconds() if self.group is not None else None
        return exact, _by_kind(self.tree)

    def close(self, timeout: float = 120.0) -> None:
        """Wait for the process to end (SIGTERM after ``timeout``, SIGKILL 30 s later)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.tree.__exit__(None, None, None)
        self._reader.join(timeout=5)
        self._group_cm.__exit__(None, None, None)
        self._log.close()


def _by_kind(tree: TreeSampler) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, seconds in list(tree.cpu.items()):
        kind = tree.cpu_kind.get(key, "?")
        out[kind] = out.get(kind, 0.0) + seconds
    return out


class DeltaCommits:
    """What a Delta output table's batch commits cover, read incrementally from its log."""

    def __init__(self, url: str, storage_options: dict[str, Any]) -> None:
        from orderedstream.sinks.deltalog import DeltaBatchLog

        self._log = DeltaBatchLog(url, storage_options)
        self._ends: dict[tuple[str, int], int] = {}
        self._seen = -1
        self._commits: list[Commit] = []

    def _poll(self) -> None:
        latest = self._log.latest_version()
        if latest is None:
            return
        for entry in self._log.entries(self._seen + 1, latest):
            ends = {}
            for key, (_, end) in entry.offsets.items():
                topic, _, partition = key.rpartition("/")
                tp = (topic, int(partition))
                ends[tp] = end
                self._ends[tp] = max(end, self._ends.get(tp, 0))
            if ends:
                self._commits.append((entry.record.created_at, ends))
        self._seen = latest

    def position(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> end offset of what the table's commits cover."""
        self._poll()
        return dict(self._ends)

    def commits(self) -> list[Commit]:
        """Each commit's time (its log entry's timestamp) and end offsets."""
        self._poll()
        return list(self._commits)


class PackEngine:
    """The main job in its own process; one query at a time (``start`` / ``stop``)."""

    name = "pack"
    cores = 2

    def __init__(self, ctx: CaseContext, work: Path) -> None:
        self.ctx, self.work = ctx, work
        argv = [sys.executable, "-c", "from benchmarks.cases._steady_engines import pack_main;"
                " pack_main()", json.dumps({"ctx": json.loads(ctx.to_json())})]
        self.process = SampledProcess(argv, work / "pack.log", stdin=True)
        self._ask({"op": "ready"}, timeout=600)
        self._table: DeltaCommits | None = None

    def _ask(self, command: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
        stdin = self.process.proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reply = self.process.replies.get(timeout=1.0)
            except queue.Empty:
                if self.process.proc.poll() is not None:
                    break
                continue
            if "error" in reply:
                raise RuntimeError(f"pack engine: {reply['error']}")
            return reply
        raise RuntimeError(f"pack engine: no reply to {command['op']!r} (exit "
                           f"{self.process.proc.poll()}); see {self.work / 'pack.log'}")

    def start(self, prefix: str, interval: float) -> None:
        """Start the main job over the ``prefix`` topics with a trigger of ``interval`` s."""
        output = self.ctx.s3_url("bench-steady", prefix, "output")
        self._table = DeltaCommits(output, self.ctx.storage_options)
        self._ask({"op": "start", "prefix": prefix, "interval": interval, "output": output,
                   "state": self.ctx.s3_url("bench-steady", prefix, "state"),
                   "checkpoint": str(self.work / f"cp-{prefix}")})

    def position(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> end offset of what the Delta table's commits cover."""
        return self._table.position() if self._table is not None else {}

    def commits(self) -> list[Commit]:
        """Each Delta commit's time (its log entry's timestamp) and end offsets."""
        return self._table.commits() if self._table is not None else []

    def stop(self) -> dict[str, Any]:
        """Stop the running query after its batch; the engine's figures of it."""
        return self._ask({"op": "stop"})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ask({"op": "exit"}, timeout=120)
        self.process.close()


def pack_main() -> None:
    """The pack engine's process: a plain session, then commands from standard input."""
    os.environ.pop(TUNING_ENV, None)  # before the pack's first use: nothing tuned
    from orderedstream.app.job.pipeline import JobOptions, finish_cleanup, start_job
    from orderedstream.app.run_cli import plain_session

    ctx = CaseContext(**json.loads(sys.argv[1])["ctx"])
    spark = plain_session("bench-steady", "local[2]")
    spark.sparkContext.setLogLevel("WARN")
    query = processor = None

    def reply(value: dict[str, Any]) -> None:
        print(REPLY + json.dumps(value), flush=True)

    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "start":
                opts = JobOptions(bootstrap=ctx.bootstrap, output=cmd["output"],
                                  state_location=cmd["state"], checkpoint=cmd["checkpoint"],
                                  topic_pattern=f"{cmd['prefix']}-.*",
                                  storage_options=ctx.storage_options,
                                  trigger=f"{int(cmd['interval'] * 1000)}ms",
                                  query_name="bench-steady")
                query, processor = start_job(spark, opts)
                reply({"started": time.time()})
            elif cmd["op"] == "stop" and query is not None and processor is not None:
                _stop_between_batches(query)
                finish_cleanup(processor, print)
                batches = len(query.recentProgress)
                reply({"records": int(processor.records_total), "progress_kept": batches})
                query = processor = None
            elif cmd["op"] == "exit":
                reply({"exit": True})
                break
            else:
                reply({"ok": True})
        except Exception as exc:  # noqa: BLE001 - told to the case process
            reply({"error": f"{type(exc).__name__}: {exc}"})
    spark.stop()


def _stop_between_batches(query: Any, timeout: float = 120.0) -> None:
    """Stop ``query`` while no trigger runs, as the CLI's SIGTERM does: a stop during a batch
    interrupts its Spark job, which fails noisily in the JVM."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (query.status or {}).get("isTriggerActive"):
        time.sleep(0.05)
    query.stop()


class QuixEngine:
    """Quix Streams, one process per phase (``start`` / ``stop``)."""

    name = "quix"
    cores = 1

    def __init__(self, ctx: CaseContext, work: Path) -> None:
        from benchmarks.cases.peer import quix_python

        self.ctx, self.work, self.python = ctx, work, quix_python()
        self.process: SampledProcess | None = None
        self.group = ""
        self.topics: list[str] = []
        self.flush_log = work / "none"
        self._ends_client: Any = None

    def start(self, prefix: str, interval: float) -> None:
        """Start the Quix app over the ``prefix`` topics, committing every ``interval`` s."""
        from benchmarks.cases._steady_feed import KafkaEnds

        phase = self.work / f"quix-{prefix}"
        phase.mkdir(parents=True, exist_ok=True)
        self.topics = topic_names(prefix)
        self.group = f"steady-quix-{prefix}"
        self.flush_log = phase / "flushes.jsonl"
        spec = {"bootstrap": self.ctx.bootstrap, "group": self.group, "topics": self.topics,
                "records": 0, "state_dir": str(phase / "state"), "output_dir": "output",
                "snapshot_every": 100, "idle_timeout": "10 minutes", "idle_s": 0,
                "result": str(phase / "result.json"), "flush_log": str(self.flush_log),
                "commit_interval": interval}
        (phase / "params.json").write_text(json.dumps(spec))
        argv = [str(self.python), str(ROOT / "benchmarks" / "quix_app.py"),
                str(phase / "params.json")]
        self.process = SampledProcess(argv, self.work / "quix.log", cwd=phase)
        self._ends_client = KafkaEnds(self.ctx.bootstrap, self.topics)

    def position(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the offsets Quix's consumer group committed."""
        return self._ends_client.committed(self.group) if self._ends_client else {}

    def commits(self) -> list[Commit]:
        """Each sink flush's end time and end offsets, from the app's flush log."""
        out: list[Commit] = []
        if self.flush_log.exists():
            for line in self.flush_log.read_text().splitlines():
                entry = json.loads(line)
                out.append((float(entry["t"]), {(t, int(p)): int(e) for t, p, e in
                                                entry["ends"]}))
        return out

    def stop(self) -> dict[str, Any]:
        """SIGTERM (Quix commits and stops), then wait for the process."""
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGTERM)
        self.process.close(timeout=120)
        code = self.process.proc.returncode
        if self._ends_client is not None:
            self._ends_client.close()
            self._ends_client = None
        if code not in (0, -signal.SIGTERM):
            raise RuntimeError(f"the Quix app exited {code}; see {self.work / 'quix.log'}")
        return {"exit": code}

    def close(self) -> None:
        if self.process is not None and self.process.proc.poll() is None:
            self.stop()


# ---- 1 vs 2 executors on a standalone cluster (benchmarks.cases._streaming.run_engine) -----
def engine_main(engine: str, ctx: CaseContext, params: dict[str, Any]) -> dict[str, Any]:
    """``cluster``: the main job drains the same backlog with 1, then 2, executors of a
    standalone cluster (master + 2 workers x 1 core); records/s of each."""
    from benchmarks.cases.scaling import _wait_executors
    from orderedstream.app.job.pipeline import JobOptions, start_job
    from orderedstream.dev.services.spark import SparkStandaloneCluster

    work = Path(params["work"]) / engine
    cluster = SparkStandaloneCluster(work / "cluster", workers=2, cores=1).start()
    out: dict[str, Any] = {}
    try:
        for executors in (1, 2):
            spark = cluster.session(f"bench-steady-{executors}", conf={
                "spark.cores.max": str(executors),
                "spark.sql.streaming.numRecentProgressUpdates": "100000"})
            try:
                _wait_executors(spark, executors)
                base = ctx.s3_url("bench-steady", params["prefix"], f"cluster-{executors}")
                opts = JobOptions(bootstrap=ctx.bootstrap, output=f"{base}/output",
                                  state_location=f"{base}/state",
                                  checkpoint=str(work / f"cp-{executors}"),
                                  topic_pattern=f"{params['prefix']}-.*",
                                  storage_options=ctx.storage_options,
                                  query_name="bench-steady-cluster")
                query, processor = start_job(spark, opts, once=True)
                figures = run_query(query, params["records"], processor=processor)
                out[str(executors)] = {k: figures[k] for k in
                                       ("records", "seconds", "records_per_s", "batches")}
            finally:
                spark.stop()
    finally:
        cluster.stop()
    return out
