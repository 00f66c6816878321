"""Executor-sticky placement of the ordered stage: per-batch time and state bytes downloaded,
with ``placement="auto"`` (the JVM shim) and ``"off"`` (Spark's own placement), standalone.

Starts its own Kafka, SeaweedFS S3 and a Spark standalone cluster (2 workers x 1 core), loads
``--state-mb`` MB of state into each of ``--partitions`` Kafka partitions (values of
``--value-kb`` KiB of random bytes, so state is incompressible and record counts stay low;
loaded in batches of ``--load-batch-mb`` MB per partition), then runs ``--batches`` rounds:
each round produces ``--per-batch`` records (updates of existing keys) and runs one
micro-batch of the "auto" query and one of the "off" query (which goes first alternates, so
load on a shared machine hits both alike). Reports, per mode, the median and p95
``foreachBatch`` time, restores and MB of state downloaded per batch, and the peak RSS of each
executor (its JVM plus Python workers) sampled every second.

Usage::

    .venv/bin/python benchmarks/placement_bench.py                      # 50 MB/partition
    .venv/bin/python benchmarks/placement_bench.py --state-mb 1024 --partitions 2 \\
        --batches 12 --per-batch 8 --lock /tmp/orderedstream-bench.lock  # 1 GB/partition

(``--lock`` holds the lock for the measured rounds only; ``flock LOCK command`` would hold it
through the long state load too.)

``spark.locality.wait`` is 60 s here (see the test ``patient_locality`` fixture: with both
executors on one host, a task queued behind a slow one would otherwise run on the other
executor after 3 s). ``--json PATH`` also writes the figures as JSON. The work directory
(Kafka log, S3 data, executors' local state copies) is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODES: tuple[Literal["auto"], Literal["off"]] = ("auto", "off")


def keep_latest(key: Any, record: Any, state: Any) -> list[tuple[Any, int]]:
    """State per key: the latest value (random bytes, incompressible)."""
    state.update(record["value"])
    return [(key, len(record["value"]))]


@dataclass(frozen=True)
class BenchConfig:
    """Sizes of one placement measurement."""

    state_mb: int = 50
    partitions: int = 4
    value_kb: int = 64
    batches: int = 12
    per_batch: int = 16
    load_batch_mb: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("state_mb", "partitions", "value_kb", "batches", "per_batch",
                     "load_batch_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: a positive integer is needed")
        if self.per_batch % self.partitions:
            raise ValueError(f"per_batch={self.per_batch} must be a multiple of "
                             f"partitions={self.partitions} (same records in every partition)")

    @property
    def value_bytes(self) -> int:
        return self.value_kb << 10

    @property
    def keys_per_partition(self) -> int:
        return max(1, (self.state_mb << 20) // self.value_bytes)

    @property
    def arrow_records(self) -> int:
        """Records per Arrow batch: about 16 MiB whatever the value size."""
        return max(1, (16 << 20) // self.value_bytes)


@dataclass
class ModeFigures:
    """Per-batch figures of one placement mode over the measured rounds."""

    mode: str
    seconds: list[float] = field(default_factory=list)
    restores: list[int] = field(default_factory=list)
    downloaded: list[int] = field(default_factory=list)
    restored: list[tuple[str, ...]] = field(default_factory=list)
    batch_ids: list[int] = field(default_factory=list)
    load_seconds: float = 0.0
    load_batches: int = 0

    def add(self, result: Any, seconds: float) -> None:
        self.seconds.append(seconds)
        self.restores.append(result.restores)
        self.downloaded.append(result.bytes_downloaded)
        self.restored.append(tuple(result.restored))
        self.batch_ids.append(result.batch_id)

    def summary(self) -> dict[str, Any]:
        from benchmarks.common import percentile

        n = len(self.seconds)
        return {"mode": self.mode, "batches": n,
                "median_s": statistics.median(self.seconds),
                "p95_s": percentile(self.seconds, 0.95),
                "mean_s": statistics.mean(self.seconds),
                "restores": sum(self.restores), "restores_per_batch": sum(self.restores) / n,
                "mb_downloaded": sum(self.downloaded) / 2**20,
                "mb_downloaded_per_batch": sum(self.downloaded) / 2**20 / n,
                "load_s": self.load_seconds, "load_batches": self.load_batches}


class RssSampler:
    """Peak RSS (MiB) of each executor (its JVM plus Python workers) and of the driver JVM,
    sampled every ``interval`` seconds in a background thread."""

    def __init__(self, cluster: Any, interval: float = 1.0) -> None:
        self.cluster = cluster
        self.interval = interval
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    @staticmethod
    def _tree_rss(proc: Any) -> float:
        import psutil

        total = 0
        for p in [proc, *proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def sample(self) -> None:
        import psutil

        for index, worker in enumerate(self.cluster.workers):
            pid = worker.pid
            if pid is None:
                continue
            try:  # the worker JVM's children: the executor JVM (and its Python workers)
                executors = psutil.Process(pid).children()
            except psutil.Error:
                continue
            rss = sum(self._tree_rss(e) for e in executors)
            key = f"executor_{index}_mb"
            self.peaks[key] = max(self.peaks.get(key, 0.0), rss)
        me = psutil.Process()
        for child in me.children():  # the driver JVM py4j launched
            try:
                if "java" in child.name():
                    rss = child.memory_info().rss / 2**20
                    self.peaks["driver_jvm_mb"] = max(self.peaks.get("driver_jvm_mb", 0.0), rss)
            except psutil.Error:
                pass
        self.peaks["driver_python_mb"] = max(self.peaks.get("driver_python_mb", 0.0),
                                             me.memory_info().rss / 2**20)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


def disk_mb(path: Path) -> float:
    """Disk used under ``path`` (MiB), hard links counted once (restored SSTs are linked)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total / 2**20


def produce(kafka: Any, topic: str, cfg: BenchConfig, keys: list[int], seed: int) -> int:
    """One record per (key, partition), values of ``cfg.value_bytes`` random bytes."""
    producer = kafka.producer(linger_ms=50, batch_num_messages=1000,
                              queue_buffering_max_kbytes=256 << 10,
                              message_max_bytes=cfg.value_bytes + (1 << 20))
    rng = random.Random(seed)
    count = 0
    for k in keys:
        for p in range(cfg.partitions):
            value = rng.randbytes(cfg.value_bytes)
            while True:
                try:
                    producer.produce(topic, key=f"p{p}-k{k}".encode(), value=value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.5)
            count += 1
        producer.poll(0)
    if producer.flush(600):
        raise RuntimeError(f"benchmark records for {topic} were not all delivered")
    return count


def run_query(spark: Any, kafka: Any, topic: str, proc: Any, checkpoint: str,
              max_offsets: int, arrow_records: int, progress: Any = None
              ) -> list[tuple[Any, float]]:
    """One Trigger.AvailableNow run; (BatchResult, foreachBatch seconds) per batch.
    ``progress(text)``, when given, hears about every batch."""
    results: list[tuple[Any, float]] = []

    def on_batch(batch_df: Any, batch_id: int) -> None:
        started = time.perf_counter()
        result = proc.process_batch(batch_df, batch_id)
        results.append((result, time.perf_counter() - started))
        if progress is not None:
            progress(f"    batch {batch_id}: {results[-1][1]:.1f}s, {result.records} records, "
                     f"{result.restores} restores")

    reader = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest")
              .option("arrowBatchMaxRecords", str(arrow_records))
              .option("maxOffsetsPerTrigger", str(max_offsets)))
    query = (reader.load().writeStream.foreachBatch(on_batch).trigger(availableNow=True)
             .option("checkpointLocation", checkpoint).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return results


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """``flock(path)`` held for the block (what ``flock PATH command`` does for a command)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def measure(cfg: BenchConfig, work: Path, log: Any = print, lock: Path | None = None
            ) -> dict[str, Any]:
    """Run the whole measurement in ``work`` (own Kafka, S3 and 2-worker cluster).

    With ``lock``, the measured rounds (not the service start-up or the state load) run under
    an exclusive ``flock`` of that file, so they never overlap other measurement runs."""
    from pyspark import cloudpickle

    from orderedstream.core import jvm
    from orderedstream.dev import shim
    from orderedstream.dev.services.kafka import KafkaBroker
    from orderedstream.dev.services.process import wait_until
    from orderedstream.dev.services.s3 import S3Server
    from orderedstream.dev.services.spark import SparkStandaloneCluster
    from orderedstream.statestore.ordered import OrderedStateful

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    shim.build(quiet=True)
    kafka = KafkaBroker(work / "kafka").start()
    s3 = S3Server(work / "s3").start()
    cluster = SparkStandaloneCluster(work / "cluster").start()
    figures = {mode: ModeFigures(mode) for mode in MODES}
    peak_disk = 0.0
    lock_stack = contextlib.ExitStack()
    try:
        spark = cluster.session("placement-bench", conf={
            "spark.locality.wait": "60s",
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(cfg.arrow_records)})
        with RssSampler(cluster) as rss:
            wait_until(lambda: len(jvm.Placement(spark).executors()) == 2, 180, "2 executors")
            topic = "placement-bench"
            kafka.create_topic(topic, cfg.partitions,
                               {"max.message.bytes": str(cfg.value_bytes + (1 << 20))})
            t0 = time.perf_counter()
            loaded = produce(kafka, topic, cfg, list(range(cfg.keys_per_partition)), cfg.seed)
            log(f"produced {loaded:,} records of {cfg.value_kb} KiB ({cfg.state_mb} MB of state "
                f"per partition x {cfg.partitions}) in {time.perf_counter() - t0:.0f}s")
            procs = {}
            load_records = cfg.partitions * max(1, (cfg.load_batch_mb << 20) // cfg.value_bytes)
            for mode in MODES:
                base = s3.url(f"bench/{mode}")
                checkpoint = str(work / f"checkpoint-{mode}")
                procs[mode] = OrderedStateful(
                    keep_latest, state_location=f"{base}/state", output=f"{base}/out",
                    output_schema="key binary, n long", storage_options=s3.storage_options,
                    checkpoint_location=checkpoint, placement=mode,
                    max_cached_keys=max(1, cfg.arrow_records))
                t0 = time.perf_counter()
                done = run_query(spark, kafka, topic, procs[mode], checkpoint, load_records,
                                 cfg.arrow_records, progress=log)
                figures[mode].load_seconds = time.perf_counter() - t0
                figures[mode].load_batches = len(done)
                peak_disk = max(peak_disk, disk_mb(work))
                log(f"{mode}: loaded in {len(done)} batches, {figures[mode].load_seconds:.0f}s; "
                    f"restores during load {sum(r.restores for r, _ in done)}; "
                    f"work dir {peak_disk / 1024:.1f} GiB")
            rng = random.Random(cfg.seed + 1)
            per_partition = cfg.per_batch // cfg.partitions
            if lock is not None:
                log(f"waiting for {lock} (measured rounds never overlap other measurements)")
                locked = time.perf_counter()
                lock_stack.enter_context(exclusive_lock(lock))
                log(f"locked after {time.perf_counter() - locked:.0f}s")
            for round_no in range(cfg.batches):
                keys = rng.sample(range(cfg.keys_per_partition),
                                  min(per_partition, cfg.keys_per_partition))
                keys += [keys[-1]] * (per_partition - len(keys))
                produce(kafka, topic, cfg, keys, cfg.seed + 2 + round_no)
                line = [f"round {round_no + 1:>2}/{cfg.batches}"]
                # alternate which mode goes first: a slow moment hits both alike
                for mode in (MODES if round_no % 2 == 0 else MODES[::-1]):
                    done = run_query(spark, kafka, topic, procs[mode],
                                     str(work / f"checkpoint-{mode}"), cfg.per_batch,
                                     cfg.arrow_records)
                    if len(done) != 1:
                        raise RuntimeError(f"{mode}: round {round_no} ran {len(done)} batches")
                    result, seconds = done[0]
                    figures[mode].add(result, seconds)
                    line.append(f"{mode} b{result.batch_id} {seconds:5.2f}s "
                                f"{result.restores}r {result.bytes_downloaded / 2**20:7.1f}MB"
                                f" {list(result.restored)}")
                log("  ".join(line))
            lock_stack.close()
            peak_disk = max(peak_disk, disk_mb(work))
            rss.sample()
        spark.stop()
    finally:
        lock_stack.close()
        cluster.stop()
        s3.kill()
        kafka.stop()
    summaries = {mode: figures[mode].summary() for mode in MODES}
    return {"config": cfg.__dict__, "modes": summaries,
            "per_batch": {mode: {"seconds": f.seconds, "restores": f.restores,
                                 "bytes_downloaded": f.downloaded, "batch_ids": f.batch_ids,
                                 "restored": [list(r) for r in f.restored]}
                          for mode, f in figures.items()},
            "peak_rss_mb": {k: round(v) for k, v in rss.peaks.items()},
            "peak_work_dir_gib": round(peak_disk / 1024, 2)}


def format_table(res: dict[str, Any]) -> str:
    rows = [(f"{'mode':<6} {'batches':>7} {'p50 s':>7} {'p95 s':>7} {'mean s':>7} "
             f"{'restores/b':>10} {'MB/batch':>9} {'MB total':>9} {'load s':>7}")]
    for mode in MODES:
        m = res["modes"][mode]
        rows.append(f"{mode:<6} {m['batches']:>7} {m['median_s']:>7.2f} {m['p95_s']:>7.2f} "
                    f"{m['mean_s']:>7.2f} {m['restores_per_batch']:>10.2f} "
                    f"{m['mb_downloaded_per_batch']:>9.1f} {m['mb_downloaded']:>9.1f} "
                    f"{m['load_s']:>7.0f}")
    auto, off = res["modes"]["auto"], res["modes"]["off"]
    rows.append(f"off/auto median time = {off['median_s'] / auto['median_s']:.2f}, "
                f"p95 = {off['p95_s'] / auto['p95_s']:.2f}")
    rows.append("peak RSS MiB: " + ", ".join(f"{k}={v}" for k, v in res["peak_rss_mb"].items())
                + f"; peak work dir {res['peak_work_dir_gib']} GiB")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = BenchConfig()
    parser.add_argument("--state-mb", type=int, default=defaults.state_mb,
                        help="state per Kafka partition, MB")
    parser.add_argument("--partitions", type=int, default=defaults.partitions)
    parser.add_argument("--value-kb", type=int, default=defaults.value_kb,
                        help="value size, KiB (random bytes)")
    parser.add_argument("--batches", type=int, default=defaults.batches,
                        help="measured small batches per mode")
    parser.add_argument("--per-batch", type=int, default=defaults.per_batch,
                        help="records per small batch (all partitions)")
    parser.add_argument("--load-batch-mb", type=int, default=defaults.load_batch_mb,
                        help="state loaded per partition per load batch, MB")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--lock", type=Path, help="flock this file for the measured rounds "
                        "only (e.g. /tmp/orderedstream-bench.lock): the load may overlap")
    args = parser.parse_args(argv)
    try:
        cfg = BenchConfig(state_mb=args.state_mb, partitions=args.partitions,
                          value_kb=args.value_kb, batches=args.batches,
                          per_batch=args.per_batch, load_batch_mb=args.load_batch_mb)
    except ValueError as exc:
        parser.error(str(exc))
    work = Path(tempfile.mkdtemp(prefix="placement-bench-"))
    print(f"work dir {work}; {cfg}", flush=True)
    started = time.perf_counter()
    try:
        res = measure(cfg, work, log=lambda s: print(s, flush=True), lock=args.lock)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res["seconds"] = round(time.perf_counter() - started)
    print(format_table(res))
    print(f"total {res['seconds']}s")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
