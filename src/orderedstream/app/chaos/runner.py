"""The chaos run: the main job under kills and faults, then a verification against Kafka.

The job runs as its own process (``orderedstream run``); one fault at a time, at random:
``kill_driver``, ``kill_worker`` (a Spark Python worker), ``kill_broker``, ``stop_s3``,
``s3_faults`` (503/500, stalls, drops), ``kill_spark_worker`` (``--cluster``). A killed job
restarts from its checkpoint; at the end it drains Kafka and checks the output with Kafka."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import psutil

from orderedstream.app.chaos.report import ChaosReport
from orderedstream.app.chaos.s3proxy import FaultyS3Proxy
from orderedstream.app.job.demo import verify_output
from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.app.job.pipeline import JobOptions, make_processor
from orderedstream.core.commitlog import CommitLog
from orderedstream.core.errors import ServiceError
from orderedstream.core.jvm import bundled_jar
from orderedstream.dev.services.azurite import AzuriteServer
from orderedstream.dev.services.gcs import GCSServer
from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.dev.services.s3 import S3Server
from orderedstream.dev.services.spark import SparkStandaloneCluster
from orderedstream.sinks.deltalog import DeltaBatchLog

FAULTS = ("kill_driver", "kill_worker", "kill_broker", "stop_s3", "s3_faults")
CLUSTER_FAULTS = FAULTS + ("kill_spark_worker",)


class ChaosRun:
    """Owns the services, the job process and the fault schedule of one chaos run."""

    def __init__(self, workdir: Path, faults: int, seed: int, gen: GeneratorOptions,
                 max_offsets_per_trigger: int = 1500, out: Any = print,
                 cluster: bool = False, batch_timeout: float = 300.0,
                 store: str = "s3") -> None:
        """``store``: "s3" (SeaweedFS behind the faulty proxy: the S3 faults), "azure" (Azurite)
        or "gcs" (fake-gcs-server, with fenced Parquet output: docs/storage.md)."""
        if store not in ("s3", "azure", "gcs"):
            raise ValueError(f"store {store!r}: give 's3', 'azure' or 'gcs'")
        self.store = store
        self.cloud: AzuriteServer | GCSServer | None = (
            AzuriteServer(workdir / "azurite") if store == "azure"
            else GCSServer(workdir / "gcs") if store == "gcs" else None)
        self._stop_producing = threading.Event()
        self.cluster: SparkStandaloneCluster | None = (
            SparkStandaloneCluster(workdir / "spark-cluster") if cluster else None)
        self.workdir = workdir
        self.n_faults = faults
        self.rng = random.Random(seed)
        self.gen = gen
        self.max_offsets = max_offsets_per_trigger
        self.batch_timeout = batch_timeout
        self.out = out
        self.report = ChaosReport()
        self.kafka = KafkaBroker(workdir / "kafka")
        self.s3 = S3Server(workdir / "s3")
        self.proxy: FaultyS3Proxy | None = None
        self.job: subprocess.Popen[bytes] | None = None
        self.job_started = 0.0
        self.recoveries: list[float] = []
        self.opts: JobOptions | None = None

    def _log_commits(self) -> Any:
        assert self.opts is not None
        if self.opts.output_format == "delta":
            return DeltaBatchLog(self.opts.output, self._storage_options(),
                                 writer_id=self.opts.query_name)
        return CommitLog(self.opts.output, self._storage_options())

    def _storage_options(self) -> dict[str, Any]:
        return self.cloud.storage_options if self.cloud is not None else self.s3.storage_options

    def _store_env(self) -> dict[str, str]:
        """The job's credentials and settings for its store, through the environment."""
        if isinstance(self.cloud, AzuriteServer):
            return self.cloud.azure_env()
        if self.cloud is not None:  # the GCS emulator: an http:// endpoint, no credentials
            return {}
        return self.s3.aws_env()

    def _endpoint_args(self) -> list[str]:
        if self.cloud is not None:
            flag = "--azure-endpoint" if self.store == "azure" else "--gcs-endpoint"
            return [flag, self.cloud.endpoint]
        assert self.proxy is not None
        return ["--s3-endpoint", self.proxy.endpoint]

    def _latest_batch(self) -> int:
        try:
            latest = self._log_commits().latest()
        except Exception:  # noqa: BLE001 - S3 may be down on purpose
            return -2
        return -1 if latest is None else latest

    def start_job(self, available_now: bool = False) -> None:
        """Start the job in its own process group, logging to the workdir's ``job.log``.

        Parameters
        ----------
        available_now
            Drain what Kafka holds and exit (``--available-now``) instead of running on."""
        assert self.opts is not None
        argv = [sys.executable, "-m", "orderedstream.app.cli", "run",
                "--bootstrap-servers", self.opts.bootstrap, "--output", self.opts.output,
                "--state", self.opts.state_location, "--checkpoint", self.opts.checkpoint,
                "--topic-pattern", self.opts.topic_pattern, *self._endpoint_args(),
                "--output-format", self.opts.output_format, "--trigger", "1 second",
                "--progress-every", "5", "--max-offsets-per-trigger", str(self.max_offsets)]
        if self.cluster is not None:  # a plain session on the cluster; else the embedded one
            argv += ["--master", self.cluster.url]
        if available_now:
            argv.append("--available-now")
        log = open(self.workdir / "job.log", "ab")  # noqa: SIM115 - owned by the child
        log.write(f"\n=== job start {time.strftime('%X')} {' '.join(argv[3:])}\n".encode())
        log.flush()
        env = {**os.environ, **self._store_env(), "PYSPARK_PYTHON": sys.executable,
               # On the cluster a plain session: the shim's jar and the executors' S3
               # credentials come through Spark's own options, as a user gives them.
               **self._submit_env(),
               "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOCAL_DIRS": str(self.workdir / "spark-local"),
               # A killed JVM's spark-<uuid> temp folders stay in the workdir, not in /tmp.
               "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={self.workdir / 'jvm-tmp'}"}
        (self.workdir / "jvm-tmp").mkdir(parents=True, exist_ok=True)
        self.job = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        log.close()
        self.job_started = time.monotonic()

    def _submit_env(self) -> dict[str, str]:
        """The job's ``PYSPARK_SUBMIT_ARGS`` on the cluster: the shim's jar and the executors'
        S3 credentials (``spark.executorEnv.*``: an executor has its worker's environment)."""
        if self.cluster is None or "PYSPARK_SUBMIT_ARGS" in os.environ:
            return {}
        args = [f"--conf spark.executorEnv.{k}={v}" for k, v in self.s3.aws_env().items()]
        jar = bundled_jar()
        if jar is not None:
            args.append(f"--jars {jar}")
        return {"PYSPARK_SUBMIT_ARGS": " ".join([*args, "pyspark-shell"])}

    def job_alive(self) -> bool:
        """Whether the job process is running."""
        return self.job is not None and self.job.poll() is None

    def kill_job(self) -> None:
        """SIGKILL the job's process group (driver, JVM, Python workers), if it runs."""
        if self.job is not None and self.job.poll() is None:
            os.killpg(self.job.pid, signal.SIGKILL)
            self.job.wait(30)

    def ensure_job(self, since: float | None = None) -> None:
        """Restart the job if a fault killed it; wait for its next committed batch.

        Parameters
        ----------
        since
            When the last fault ended (``time.monotonic()``), to keep a recovery time; or None.

        Raises
        ------
        RuntimeError
            No batch was committed within the batch timeout."""
        if not self.job_alive():
            self.report.job_restarts += 1
            self.start_job()
        before = self._latest_batch()
        deadline = time.monotonic() + self.batch_timeout
        while time.monotonic() < deadline:
            latest = self._latest_batch()
            if latest > before >= -1 or (latest >= 0 and before == -2):
                if since is not None:
                    self.recoveries.append(round(time.monotonic() - since, 1))
                return
            if not self.job_alive():
                self.report.job_restarts += 1
                self.start_job()
            time.sleep(0.5)
        raise RuntimeError(f"the job committed no batch for {self.batch_timeout:.0f}s (a start "
                           f"and its first batch; --batch-timeout); see {self.workdir}/job.log")

    def inject(self, fault: str) -> None:
        """Inject ``fault`` at a random moment of the running batch and count it.

        Parameters
        ----------
        fault
            One of :data:`CLUSTER_FAULTS` (the S3 ones need the "s3" store); ``kill_worker``
            with no Python worker running becomes ``kill_driver``."""
        time.sleep(self.rng.uniform(0.2, 4.0))
        if fault == "kill_driver":
            self.kill_job()
        elif fault == "kill_worker":
            workers = self._python_workers()
            if not workers:
                fault = "kill_driver"
                self.kill_job()
            else:
                self.rng.choice(workers).kill()
        elif fault == "kill_spark_worker":
            assert self.cluster is not None
            index = self.rng.randrange(len(self.cluster.workers))
            self.cluster.kill_worker(index)
            time.sleep(self.rng.uniform(2, 6))
            self.cluster.restart_worker(index)
        elif fault == "kill_broker":
            self.kafka.kill()
            time.sleep(self.rng.uniform(1, 5))
            self.kafka.restart()
        elif fault == "stop_s3":
            assert self.proxy is not None, f"{fault}: the run's store is {self.store}, not S3"
            self.s3.kill()
            time.sleep(self.rng.uniform(1, 5))
            self.s3.restart()
        elif fault == "s3_faults":
            assert self.proxy is not None, f"{fault}: the run's store is {self.store}, not S3"
            self.proxy.rates.slow_down = 0.15
            self.proxy.rates.internal_error = 0.05
            self.proxy.rates.stall = 0.05
            self.proxy.rates.stall_seconds = 2.0
            self.proxy.rates.drop_request = 0.03
            self.proxy.rates.drop_response = 0.05
            time.sleep(self.rng.uniform(4, 10))
            self.proxy.rates = type(self.proxy.rates)()
        self.report.faults[fault] = self.report.faults.get(fault, 0) + 1
        self.out(f"[chaos] {sum(self.report.faults.values()):3d} {fault:12s} "
                 f"(job {'alive' if self.job_alive() else 'dead'})")

    def _python_workers(self) -> list[psutil.Process]:
        if not self.job_alive() or self.job is None:
            return []
        try:
            tree = psutil.Process(self.job.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for proc in tree:
            try:
                cmd = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                found.append(proc)
        # Forked workers are children of the daemon; prefer them over the daemon itself.
        children = [p for p in found if p.ppid() in {q.pid for q in found}]
        return children or found

    _stop_producing = threading.Event()
    _producer_error: BaseException | None = None

    def _create_topic(self, name: str, partitions: int, attempts: int = 3) -> None:
        """Create a generator topic in up to ``attempts`` tries (a slow broker); a topic an
        earlier timed-out try created counts as made."""
        from confluent_kafka import KafkaException

        for attempt in range(1, attempts + 1):
            try:
                self.kafka.create_topic(name, partitions)
                return
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" in str(exc):
                    return
                if attempt == attempts:
                    raise
            except ServiceError:  # created, but its partitions had no leader in time
                if attempt == attempts:
                    raise
            time.sleep(2.0)

    def _topics_exist(self) -> bool:
        try:
            topics = self.kafka.admin().list_topics(timeout=5).topics
        except Exception:  # noqa: BLE001 - broker starting
            return False
        return any(t.startswith(f"{self.gen.prefix}-") for t in topics)

    def _produce_waves(self) -> None:
        """Generate waves of sessions (paced) until told to stop; wave 0 adds a late topic."""
        wave = 0
        try:
            while not self._stop_producing.is_set():
                opts = self.gen if wave == 0 else replace(
                    self.gen, sites=self.gen.sites + self.gen.late_sites, late_sites=0,
                    seed=self.gen.seed + wave, session_tag=f"w{wave}")
                stats = generate(self.kafka.bootstrap, opts, create_topic=self._create_topic)
                self.report.records_generated += stats.records
                wave += 1
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._producer_error = exc

    def run(self) -> ChaosReport:
        """Run the job under the fault schedule while data flows, then drain and verify.

        Returns
        -------
        ChaosReport
            The faults, restarts, recovery times and the verification.

        Raises
        ------
        RuntimeError
            The generator failed, no batch came in time or the drain failed."""
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kafka.start()
        if self.cloud is not None:
            self.cloud.start()
            base = self.cloud.url("chaos")
        else:
            self.s3.start()
            self.proxy = FaultyS3Proxy(self.s3.port, seed=self.rng.randrange(1 << 30)).start()
            base = f"s3://{self.s3.bucket}/chaos"
        if self.cluster is not None:
            self.cluster.start()
        self.opts = JobOptions(bootstrap=self.kafka.bootstrap, output=f"{base}/output",
                               output_format="parquet" if self.store == "gcs" else "delta",
                               state_location=f"{base}/state",
                               checkpoint=str(self.workdir / "checkpoint"),
                               topic_pattern=f"{self.gen.prefix}-.*")
        try:
            producer = threading.Thread(target=self._produce_waves, name="chaos-generator",
                                        daemon=True)
            producer.start()
            while not self._topics_exist():
                if not producer.is_alive():  # it died before its first topic: say why now
                    raise RuntimeError("the chaos generator stopped before creating a topic"
                                       ) from self._producer_error
                time.sleep(0.2)
            self.start_job()
            kinds = CLUSTER_FAULTS if self.cluster is not None else FAULTS
            if self.cloud is not None:
                kinds = tuple(k for k in kinds if k not in ("stop_s3", "s3_faults"))
            schedule = [kinds[i % len(kinds)] for i in range(self.n_faults)]
            self.rng.shuffle(schedule)
            fault_ended: float | None = None
            for fault in schedule:
                self.ensure_job(since=fault_ended)
                self.inject(fault)
                fault_ended = time.monotonic()
            self.ensure_job(since=fault_ended)
            self._stop_producing.set()
            producer.join(timeout=600)
            if self._producer_error is not None:
                raise RuntimeError("the chaos generator failed") from self._producer_error
            self.kill_job()
            if self.proxy is not None:
                self.proxy.rates = type(self.proxy.rates)()
            self.out(f"[chaos] faults done; {self.report.records_generated} records generated; "
                     "draining Kafka with Trigger.AvailableNow")
            self.start_job(available_now=True)
            assert self.job is not None
            code = self.job.wait(1800)
            if code != 0:
                raise RuntimeError(f"the final drain run exited {code}; see {self.workdir}/job.log")
            self._verify()
        finally:
            self.kill_job()
            if self.proxy is not None:
                self.proxy.stop()
            self.kafka.kill()
            if self.cloud is not None:
                self.cloud.kill()
            else:
                self.s3.kill()
            if self.cluster is not None:
                self.cluster.stop()
        if self.proxy is not None:
            self.report.s3_requests_faulted = {k: v for k, v in self.proxy.counts.items()
                                               if k != "pass"}
        if self.recoveries:
            self.report.recovery_seconds_median = round(statistics.median(self.recoveries), 2)
            self.report.recovery_seconds_max = max(self.recoveries)
        self.report.seconds = time.monotonic() - began
        return self.report

    def _verify(self) -> None:
        assert self.opts is not None
        opts = JobOptions(**{**asdict(self.opts),
                             "storage_options": self._storage_options()})
        processor = make_processor(opts)
        verdict = verify_output(processor, opts)
        latest = processor.log.latest()
        self.report.batches_committed = 0 if latest is None else latest + 1
        self.report.records_checked = verdict.checked
        for name in ("lost", "duplicated", "out_of_order", "dead_letters_missing",
                     "wrong_final_tables"):
            setattr(self.report, name, getattr(verdict, name))
        self.report.examples = verdict.examples


def main(argv: list[str] | None = None) -> int:
    """The command line: run the chaos run, write its report to the workdir and print it.

    Parameters
    ----------
    argv
        The arguments (``--help`` lists them); None: ``sys.argv``.

    Returns
    -------
    int
        0 when the report is OK, 1 otherwise."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m orderedstream.app.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=50, help="faults to inject (default 50)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workdir", type=Path, help="services, job log and report go here")
    parser.add_argument("--sessions", type=int, default=10, help="sessions per site and wave")
    parser.add_argument("--updates", type=int, default=60, help="changes per session")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=1500)
    parser.add_argument("--cluster", action="store_true",
                        help="run the job on a Spark standalone cluster (2 workers) and also "
                             "kill cluster workers")
    parser.add_argument("--batch-timeout", type=float, default=300.0,
                        help="seconds a (re)started job has for its next committed batch, its "
                             "Spark session's start included (default 300; more on a loaded "
                             "machine: a plain cluster session starts its workers cold)")
    parser.add_argument("--rate", type=float, default=150.0,
                        help="records per second produced while faults happen")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="orderedstream-chaos-"))
    gen = GeneratorOptions(prefix="chaos", sites=3, late_sites=1, partitions=3,
                           sessions_per_site=args.sessions, rows=10, updates=args.updates,
                           seed=args.seed, rate=args.rate)
    run = ChaosRun(workdir, args.faults, args.seed, gen, args.max_offsets_per_trigger,
                   out=lambda line: print(line, flush=True), cluster=args.cluster,
                   batch_timeout=args.batch_timeout)
    report = run.run()
    (workdir / "chaos-report.json").write_text(json.dumps(report.as_dict(), indent=2))
    (workdir / "chaos-report.md").write_text(report.markdown())
    print(report.markdown())
    print(f"[chaos] report: {workdir}/chaos-report.md")
    return 0 if report.ok else 1
