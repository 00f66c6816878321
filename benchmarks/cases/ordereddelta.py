"""The ordered stage writing Delta Lake vs writing fenced Parquet: same topic, same logic.

Both engines are ``OrderedStateful`` over ``orderedkafka`` with ``emit=ranges`` (the ``ordered``
case's setup: each in its own process, after a warm-up query in the same session), one with
``output_format="delta"`` (one Delta commit per batch), one with the fenced Parquet output.
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
    work = Path(tempfile.mkdtemp(prefix="ordereddelta-", dir=ctx.workdir))
    topic = f"bench-ordereddelta-{stamp}"
    produce(ctx.bootstrap, topic, records, partitions, keys)
    warmup = max(1000, records // 50)
    produce(ctx.bootstrap, f"{topic}-warmup", warmup, partitions, max(10, warmup // 50))
    res = measure(ctx, topic, records, partitions, work, ("ordered_delta", "ordered"),
                  warmup_topic=f"{topic}-warmup")
    how = (f"{records:,} records over {partitions} partitions and {keys:,} keys, orderedkafka "
           "emit=ranges, Trigger.AvailableNow, output and state on local disk, local[2], each "
           f"in its own process after a {warmup:,}-record warm-up query")
    figures = {e: {k: res[e][k] for k in ("seconds", "peak_rss_mb", "batches", "violations")}
               for e in res}
    return [Result("ordered delta", "records/s: Delta output vs fenced Parquet output",
                   "records/s", res["ordered_delta"]["records_per_s"],
                   res["ordered"]["records_per_s"], "OrderedStateful, fenced Parquet output",
                   how, extra=figures)]
