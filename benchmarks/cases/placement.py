"""Executor-sticky placement (JVM shim) vs Spark's own placement, as a harness case.

Runs ``benchmarks.placement_bench.measure``: a 2-worker standalone cluster (with its own Kafka
and S3, since the harness's services have no cluster), state loaded into each Kafka partition,
then small micro-batches of ``placement="auto"`` and ``"off"`` interleaved. Figures: median
and p95 ``foreachBatch`` time, restores and state MB downloaded per batch; ratio > 1 means
the shim is better. ``tiny``: 2 MB per partition, 2 partitions, 2 batches (a smoke
run; ~7 min on the loaded 2-core machine, mostly the cluster's and the first batch's
start-up); ``default``: 16 MB x 4 partitions, 6 batches; ``large``: 256 MB x 4, 12.
The 1 GB-per-partition figure is a standalone run: ``benchmarks/placement_bench.py
--state-mb 1024``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"state_mb": 2, "partitions": 2, "batches": 2, "per_batch": 4},
    "default": {"state_mb": 16, "partitions": 4, "batches": 6, "per_batch": 8},
    "large": {"state_mb": 256, "partitions": 4, "batches": 12, "per_batch": 16},
}
BASELINE = "Spark's own placement (placement='off')"


def run(ctx: Any) -> list[Any]:
    """benchmarks.run case: both placement modes, same data, same cluster, one process."""
    from benchmarks.common import Result
    from benchmarks.placement_bench import BenchConfig, measure

    cfg = BenchConfig(**SIZES.get(ctx.size, SIZES["default"]))
    work = Path(tempfile.mkdtemp(prefix="placement-", dir=ctx.workdir))
    try:
        res = measure(cfg, work, log=lambda s: print(s, flush=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    auto, off = res["modes"]["auto"], res["modes"]["off"]
    how = (f"{cfg.state_mb} MB of state ({cfg.value_kb} KiB random values) in each of "
           f"{cfg.partitions} Kafka partitions, then {cfg.batches} micro-batches of "
           f"{cfg.per_batch} records per mode, interleaved; standalone cluster, 2 workers x 1 "
           "core, spark.locality.wait=60s, state on SeaweedFS S3")
    extra = {"peak_rss_mb": res["peak_rss_mb"], "peak_work_dir_gib": res["peak_work_dir_gib"],
             "load_s": {m: round(res["modes"][m]["load_s"]) for m in ("auto", "off")}}
    return [
        Result("placement", "median batch time", "s", auto["median_s"], off["median_s"],
               BASELINE, how, higher_is_better=False, extra=extra),
        Result("placement", "p95 batch time", "s", auto["p95_s"], off["p95_s"], BASELINE, how,
               higher_is_better=False),
        Result("placement", "state downloaded per batch", "MB",
               auto["mb_downloaded_per_batch"], off["mb_downloaded_per_batch"], BASELINE,
               "state bytes tasks fetched from S3 to open their partition (0 = local copy "
               "reused)", higher_is_better=False),
        Result("placement", "restores per batch", "partitions", auto["restores_per_batch"],
               off["restores_per_batch"], BASELINE,
               "partitions whose task restored state from S3 instead of reusing its copy",
               higher_is_better=False),
    ]
