"""The ordered stage in the query's plan (``apply`` + ``commit_batch``) vs inside foreachBatch.

Both engines are ``OrderedStateful`` over ``orderedkafka`` with ``emit=ranges`` writing Delta
(the main job's setup; the ``ordered`` case's harness: each in its own process, after a
warm-up query in the same session). ``ordered_inplan`` puts the stage and its
``Dataset.observe`` into the streaming plan, so Spark's progress carries its figures;
``ordered_delta`` runs it from ``process_batch`` (one more Spark job per batch: the planned
offsets). Ratio > 1: the in-plan form is faster.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cases.ordered import measure, produce


def run(ctx: Any) -> list[Any]:
    from benchmarks.common import Result

    records = ctx.scale.get("ordered_records", ctx.scale["records"])
    partitions = ctx.scale["partitions"]
    keys = max(10, records // 50)
    stamp = int(time.time())
    work = Path(tempfile.mkdtemp(prefix="inplan-", dir=ctx.workdir))
    topic = f"bench-inplan-{stamp}"
    produce(ctx.bootstrap, topic, records, partitions, keys)
    warmup = max(1000, records // 50)
    produce(ctx.bootstrap, f"{topic}-warmup", warmup, partitions, max(10, warmup // 50))
    per_trigger = max(1000, records // 20)  # about 20 batches: the per-batch cost shows
    res = measure(ctx, topic, records, partitions, work, ("ordered_inplan", "ordered_delta"),
                  warmup_topic=f"{topic}-warmup", max_offsets_per_trigger=per_trigger)
    how = (f"{records:,} records over {partitions} partitions and {keys:,} keys, orderedkafka "
           f"emit=ranges, maxOffsetsPerTrigger {per_trigger:,}, Delta output, "
           "Trigger.AvailableNow, output and state on local disk, "
           f"local[2], each in its own process after a {warmup:,}-record warm-up query")
    figures = {e: {k: res[e][k] for k in ("seconds", "peak_rss_mb", "batches", "violations",
                                       "duration_ms")}
               for e in res}
    return [Result("ordered in plan", "records/s: stage in the query's plan vs in foreachBatch",
                   "records/s", res["ordered_inplan"]["records_per_s"],
                   res["ordered_delta"]["records_per_s"],
                   "OrderedStateful.process_batch (Delta output)", how, extra=figures)]
