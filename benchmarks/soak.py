"""Soak: the main job at a fixed input rate for N minutes, with the upkeep a long run needs.

Usage: ``scripts/soak --minutes N [--rate R] [--workdir DIR]``. It starts a local Kafka broker
and SeaweedFS S3, twelve Kafka partitions fed by the job's generator at a fixed rate
(``benchmarks.cases._steady_feed``), and the job as a user runs it (``orderedstream run
--master local[2]``). The upkeep is what the pack has, scheduled as a user would: the Delta
log checkpoints and the state retention run inside the job on their own; ``orderedstream
table compact`` and ``orderedstream table vacuum`` run from here every few minutes, as cron
would. Every minute it prints the lag, the job's RSS and the time to read the Delta log.

At the end the input stops, the job catches up and stops, and the table is verified with
delta-rs, DuckDB and Polars against the topics (``orderedstream.app.job.verify``: exactly the
committed rows, none lost, duplicated or reordered). The exit code is 1 when a verification
fails or when lag, RSS or the log's read time keeps growing over the second half of the run
after its warm-up (a least-squares slope against a bound), else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.cases._steady_engines import DeltaCommits
from benchmarks.cases._steady_feed import (
    KafkaEnds,
    create_topics,
    feeder_stats,
    start_feeder,
)
from benchmarks.cases._tree import TreeSampler
from benchmarks.common import second_half, slope_error_per_minute, slope_per_minute

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "orderedstream.app.cli", *args]


def log_read_seconds(url: str, storage_options: dict[str, Any]) -> float:
    """Wall seconds delta-rs takes to load the table's current state from its log."""
    from deltalake import DeltaTable

    from orderedstream.sinks.deltafiles import delta_storage_options

    began = time.perf_counter()
    table = DeltaTable(url, storage_options=delta_storage_options(url, storage_options))
    table.file_uris()
    return time.perf_counter() - began


def readers(url: str, storage_options: dict[str, Any], columns: list[str]
            ) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    """Reader name -> a call that reads the table's committed rows (``columns``) with
    delta-rs, DuckDB or Polars."""
    from orderedstream.sinks.deltafiles import delta_storage_options
    from orderedstream.sinks.deltalog import DeltaOutput

    storage = delta_storage_options(url, storage_options)

    def duck() -> list[dict[str, Any]]:
        import duckdb
        from deltalake import DeltaTable

        dataset = DeltaTable(url, storage_options=storage).to_pyarrow_dataset()  # noqa: F841
        quoted = ", ".join(f'"{c}"' for c in columns)  # offset, row, values: keywords
        relation = duckdb.sql(f"select {quoted} from dataset")
        assert relation is not None
        return list(relation.to_arrow_table().to_pylist())

    def polars() -> list[dict[str, Any]]:
        import polars as pl

        return pl.read_delta(url, storage_options=storage or None).select(columns).to_dicts()

    return {"delta-rs": lambda: DeltaOutput(url, storage_options).to_arrow()
            .select(columns).to_pylist(),
            "duckdb": duck, "polars": polars}


def verify(bootstrap: str, pattern: str, url: str, storage_options: dict[str, Any]
           ) -> dict[str, dict[str, Any]]:
    """Each reader's verdict (``Verification.as_dict``) of the table against the topics; a
    reader that fails gives ``ok`` False and its error."""
    from orderedstream.app.job.verify import compare, expected_from_topics, read_topics

    changes, dead, final = expected_from_topics(read_topics(bootstrap, pattern))
    cols = ["kind", "topic", "partition", "offset", "session", "seq", "applied_seq", "op",
            "row", "values"]
    out: dict[str, dict[str, Any]] = {}
    for reader, read in readers(url, storage_options, cols).items():
        try:
            rows = read()
            verdict = compare(changes, dead, final,
                              [r for r in rows if r["kind"] == "change"],
                              [r for r in rows if r["kind"] == "dead_letter"],
                              [{**r, "values": json.loads(r["values"])} for r in rows
                               if r["kind"] == "snapshot" and r["op"] == "final"])
            out[reader] = {**verdict.as_dict(), "rows": len(rows)}
        except Exception as exc:  # noqa: BLE001 - reported as this reader's failure
            out[reader] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    return out


def jvm_memory(pid: int) -> dict[str, float]:
    """MiB of a JVM's heap (committed and used, from ``jcmd GC.heap_info``) and, when the JVM
    runs with ``-XX:NativeMemoryTracking=summary``, its committed memory by NMT category; an
    empty dict when ``jcmd`` is missing or the JVM does not answer."""
    out: dict[str, float] = {}
    for command in ("GC.heap_info", "VM.native_memory"):
        try:
            said = subprocess.run(["jcmd", str(pid), command, *(["summary"] if "native" in
                                                               command else [])],
                                  capture_output=True, text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return out
        heap = re.search(r"heap\s+total (\d+)K, used (\d+)K", said)
        if heap:
            out["heap committed"] = round(int(heap[1]) / 1024, 1)
            out["heap used"] = round(int(heap[2]) / 1024, 1)
        for name, committed in re.findall(r"-\s+([A-Za-z ]+?) \(reserved=\d+KB, "
                                          r"committed=(\d+)KB", said):
            out[f"nmt {name.strip()}"] = round(int(committed) / 1024, 1)
    return out


def bounded(name: str, series: list[tuple[float, float]], limit_per_min: float) -> dict:
    """The slope test of one series over its second half: growing when the least-squares
    slope (per minute) is above ``limit_per_min`` by more than twice its standard error, so
    that a short run's noise (a JVM heap resize, a compaction) is not taken for growth."""
    half = second_half(series)
    slope, error = slope_per_minute(half), slope_error_per_minute(half)
    return {"series": name, "slope_per_min": round(slope, 4),
            "stderr_per_min": round(error, 4) if error != float("inf") else None,
            "limit_per_min": limit_per_min, "bounded": slope - 2 * error <= limit_per_min}


class Soak:
    """One soak run: services, topics, the job, the feeder, upkeep, samples, verdicts."""

    def __init__(self, args: argparse.Namespace, endpoints: Any, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.bootstrap = endpoints.bootstrap
        self.storage = endpoints.storage_options
        self.endpoint = endpoints.s3_endpoint
        self.prefix = f"soak-{time.strftime('%H%M%S')}"
        self.output = f"s3://lake/{self.prefix}/output"
        self.state = f"s3://lake/{self.prefix}/state"
        self.samples: dict[str, list[tuple[float, float]]] = {"lag": [], "rss_mib": [],
                                                              "log_read_s": []}
        self.upkeep: list[dict[str, Any]] = []
        self.by_kind: dict[str, list[tuple[float, float]]] = {}
        """RSS MiB by kind of process (the JVM, the driver's Python, pyspark's workers)."""

    def _env(self) -> dict[str, str]:
        from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY

        return {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                "PYSPARK_PYTHON": sys.executable}

    def start_job(self) -> subprocess.Popen[bytes]:
        argv = _cli("run", "--master", self.args.master, "--bootstrap-servers", self.bootstrap,
                    "--output", self.output, "--state", self.state,
                    "--checkpoint", str(self.workdir / "checkpoint"),
                    "--topic-pattern", f"{self.prefix}-.*", "--s3-endpoint", self.endpoint,
                    "--trigger", self.args.trigger, "--progress-every", "60",
                    "--log-file", str(self.workdir / "job-spark.log"))
        with open(self.workdir / "job.log", "ab") as log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self._env(), cwd=ROOT,
                                    start_new_session=True)

    def table(self, *args: str) -> dict[str, Any]:
        """Run ``orderedstream table ARGS URL`` as a user's cron would; what it said."""
        began = time.monotonic()
        done = subprocess.run(_cli("table", *args, self.output, "--s3-endpoint",
                                   self.endpoint), env=self._env(), cwd=ROOT,
                              capture_output=True, text=True, timeout=600, check=False)
        entry = {"at": time.time(), "command": f"table {' '.join(args)}",
                 "exit": done.returncode, "seconds": round(time.monotonic() - began, 2),
                 "said": (done.stdout.strip().splitlines() or [""])[0][:200]}
        if done.returncode != 0:
            entry["error"] = done.stderr.strip()[-500:]
        self.upkeep.append(entry)
        print(f"[soak] {entry['command']}: exit {entry['exit']} in {entry['seconds']} s; "
              f"{entry['said']}", flush=True)
        return entry

    def run(self) -> dict[str, Any]:
        args = self.args
        topics = create_topics(self.bootstrap, self.prefix)
        job = self.start_job()
        tree = TreeSampler(job.pid, interval=2.0, pss_every=1_000_000).__enter__()
        kafka, commits = KafkaEnds(self.bootstrap, topics), DeltaCommits(self.output,
                                                                        self.storage)
        seconds = args.minutes * 60
        print(f"[soak] job pid {job.pid}; feeding {args.rate:,.0f} records/s into {len(topics)}"
              f" topics x 3 partitions for {args.minutes:g} min (log: {self.workdir})",
              flush=True)
        feeder = start_feeder(self.bootstrap, self.prefix, args.rate, seconds, 1,
                              self.workdir / "feeder.log")
        began = time.time()
        next_print, next_compact, next_vacuum = began + 60, began + args.compact_every * 60, \
            began + args.vacuum_every * 60
        try:
            while feeder.poll() is None:
                if job.poll() is not None:
                    raise RuntimeError(f"the job exited {job.returncode}; see "
                                       f"{self.workdir / 'job.log'}")
                self._sample(kafka, commits, tree)
                now = time.time()
                if now >= next_print:
                    next_print += 60
                    self._print(now - began)
                    self._log_processes(tree)
                if now >= next_compact:
                    next_compact += args.compact_every * 60
                    self.table("compact")
                if now >= next_vacuum:
                    next_vacuum += args.vacuum_every * 60
                    self.table("vacuum", "--retention-hours", "1")
                time.sleep(args.sample_seconds)
            fed = feeder_stats(feeder, timeout=60)
            caught = self._catch_up(kafka, commits, tree, timeout=max(300.0, seconds / 4))
        finally:
            if job.poll() is None:
                # the CLI alone: it stops after its running batch and then stops its JVM
                # (SIGTERM to the whole group would kill the JVM under it, exit 1)
                job.send_signal(signal.SIGTERM)
                try:
                    job.wait(180)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
            tree.__exit__(None, None, None)
            kafka.close()
        self._print(time.time() - began)
        print("[soak] verifying the table with delta-rs, DuckDB and Polars ...", flush=True)
        verdicts = verify(self.bootstrap, f"{self.prefix}-.*", self.output, self.storage)
        warm = self._warm_from(began)
        judged = {k: [p for p in v if p[0] >= warm] for k, v in self.samples.items()}
        tests = [bounded("lag", judged["lag"], args.rate * 10 / max(1.0, seconds / 120)),
                 bounded("rss_mib", judged["rss_mib"], args.max_rss_slope),
                 bounded("log_read_s", judged["log_read_s"], args.max_read_slope)]
        kinds = [bounded(f"rss_mib {kind}", [p for p in series if p[0] >= warm],
                         args.max_rss_slope) for kind, series in sorted(self.by_kind.items())]
        ok = caught and all(v["ok"] for v in verdicts.values()) and all(
            t["bounded"] for t in tests)
        return {"ok": ok, "minutes": args.minutes, "rate": args.rate, "fed": fed,
                "caught_up": caught, "job_exit": job.returncode, "verification": verdicts,
                "warm_after_s": round(warm - began, 1),
                "slopes": tests, "rss_slopes_by_kind": kinds, "upkeep": self.upkeep,
                "peak_rss_mib": tree.peak_mb, "samples": self.samples,
                "rss_by_kind": self.by_kind}

    def _warm_from(self, began: float) -> float:
        """When the warm-up ends: the first sample, ``--warmup-minutes`` in or later, with
        the lag at most 10 s of input (the plain session's first batches start its
        workers and catch up the input of its start); slopes are judged after it."""
        earliest = began + self.args.warmup_minutes * 60
        for when, lag in self.samples["lag"]:
            if when >= earliest and lag <= self.args.rate * 10:
                return when
        return earliest

    def _sample(self, kafka: KafkaEnds, commits: DeltaCommits, tree: TreeSampler) -> float:
        now = time.time()
        ends, done = kafka.ends(), commits.position()
        lag = float(sum(max(0, e - done.get(tp, 0)) for tp, e in ends.items()))
        self.samples["lag"].append((now, lag))
        if tree.rss_series:
            self.samples["rss_mib"].append((now, tree.rss_series[-1][1]))
            kinds: dict[str, float] = {}
            for proc in tree.last_processes:
                kinds[proc["kind"]] = kinds.get(proc["kind"], 0.0) + proc["rss_mib"]
            for kind, mib in kinds.items():
                self.by_kind.setdefault(kind, []).append((now, mib))
        if done:
            self.samples["log_read_s"].append((now, log_read_seconds(self.output,
                                                                     self.storage)))
        return lag

    def _catch_up(self, kafka: KafkaEnds, commits: DeltaCommits, tree: TreeSampler,
                  timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._sample(kafka, commits, tree) == 0:
                return True
            time.sleep(self.args.sample_seconds)
        return False

    def _log_processes(self, tree: TreeSampler) -> None:
        """Append the job's processes (and each JVM's heap and native memory) to
        ``processes.jsonl`` in the work folder: which process grows, when RSS grows."""
        processes = [dict(p) for p in tree.last_processes]
        for proc in processes:
            if proc["kind"] == "jvm":
                proc["memory"] = jvm_memory(proc["pid"])
        with open(self.workdir / "processes.jsonl", "a") as out:
            out.write(json.dumps({"at": time.time(), "processes": processes}) + "\n")

    def _print(self, elapsed: float) -> None:
        last = {k: (v[-1][1] if v else float("nan")) for k, v in self.samples.items()}
        print(f"[soak] {elapsed / 60:5.1f} min: lag {last['lag']:,.0f} records, RSS "
              f"{last['rss_mib']:,.0f} MiB, Delta log read {last['log_read_s'] * 1000:,.0f} ms",
              flush=True)
        split = ", ".join(f"{kind} {series[-1][1]:,.0f}" for kind, series
                          in sorted(self.by_kind.items()) if series)
        print(f"[soak]        RSS MiB by process: {split}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """``scripts/soak``: run, print the verdicts, write ``soak-report.json``; the exit code.

    Parameters
    ----------
    argv
        Command-line arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when every reader verified the table and no series kept growing, else 1.
    """
    from orderedstream.dev.services.embedded import embedded_services

    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="how long the input runs (default 30)")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="records per second fed (default 2000)")
    parser.add_argument("--trigger", default="2 seconds", help="the job's trigger interval")
    parser.add_argument("--master", default="local[2]", help="the job's Spark master")
    parser.add_argument("--compact-every", type=float, default=2.0,
                        help="minutes between 'orderedstream table compact' runs (default 2)")
    parser.add_argument("--vacuum-every", type=float, default=4.0,
                        help="minutes between 'orderedstream table vacuum' runs (default 4)")
    parser.add_argument("--warmup-minutes", type=float, default=1.0,
                        help="minutes of the start not judged by the slope tests, and then "
                             "until the job first caught up (default 1)")
    parser.add_argument("--sample-seconds", type=float, default=5.0,
                        help="seconds between samples of lag, RSS and log read time")
    parser.add_argument("--max-rss-slope", type=float, default=1.0,
                        help="MiB/min the job's RSS may grow over the second half (default 1)")
    parser.add_argument("--max-read-slope", type=float, default=0.05,
                        help="seconds/min the log's read time may grow over the second half "
                             "(default 0.05)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="services, logs and the report go here (default: a temp folder)")
    args = parser.parse_args(argv)
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="orderedstream-soak-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    with embedded_services(workdir=workdir / "services") as endpoints:
        report = Soak(args, endpoints, workdir).run()
    (workdir / "soak-report.json").write_text(json.dumps(report, indent=2))
    for reader, verdict in report["verification"].items():
        if "error" in verdict:
            print(f"[soak] {reader}: FAILED to read the table: {verdict['error']}")
            continue
        print(f"[soak] {reader}: {verdict['rows']:,} rows, {verdict['checked']:,} changes "
              f"checked, lost {verdict['lost']}, duplicated {verdict['duplicated']}, out of "
              f"order {verdict['out_of_order']}, wrong final tables "
              f"{verdict['wrong_final_tables']}: {'ok' if verdict['ok'] else 'FAILED'}")
    for test in report["rss_slopes_by_kind"]:
        print(f"[soak] RSS of {test['series'].removeprefix('rss_mib ')} over the second "
              f"half: {test['slope_per_min']:g} +- {test['stderr_per_min']} MiB/min")
    for test in report["slopes"]:
        print(f"[soak] {test['series']} slope over the second half {test['slope_per_min']:g}"
              f" +- {test['stderr_per_min']}/min (bound {test['limit_per_min']:g}): "
              f"{'bounded' if test['bounded'] else 'GROWING'}")
    print(f"[soak] {'ok' if report['ok'] else 'FAILED'}; report: {workdir / 'soak-report.json'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
