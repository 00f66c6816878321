"""The ordered stage's state stays bounded under retention: a 30-batch run on real Kafka, S3
and Spark, counted in state objects (manifests, files), not in bytes of memory or seconds.

Slow (several minutes): ``scripts/test -m slow -s
tests/statestore/ordered/test_ordered_retention_bounded.py``. Prints the counts as one JSON
object (and writes it to ``$RETENTION_FIGURES`` when set): after 30 batches without cleanup,
after ``cleanup_state`` with keep 10 and keep 1, and for a run cleaning every 5 batches
(keep 10). Sizes: ``RETENTION_FIGURES_{PARTITIONS,BATCHES,PER_BATCH,KEYS}`` (default 4, 30,
250, 1000).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import fsspec
import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from orderedstream.statestore.ordered import OrderedStateful
from orderedstream.statestore.retention import artifact_of
from tests.statestore.ordered.kafka_frames import kafka_batch

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARTITIONS, BATCHES, PER_BATCH, KEYS = (int(os.environ.get(f"RETENTION_FIGURES_{name}", default))
                                        for name, default in (("PARTITIONS", 4), ("BATCHES", 30),
                                                              ("PER_BATCH", 250), ("KEYS", 1000)))
SCHEMA = "key binary, partition int, offset long, count long"


def count_updates(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    count = state.get_option(0) + 1
    state.update(count)
    return [(key, record["partition"], record["offset"], count)]


def _objects(proc: OrderedStateful) -> dict[str, int]:
    fs, root = fsspec.core.url_to_fs(proc.options.state_location, skip_instance_cache=True,
                                     **proc.options.storage_options)
    fs.invalidate_cache(root)
    out = {"manifests": 0, "files": 0, "bytes": 0}
    for path, info in fs.find(root, detail=True).items():
        found = artifact_of(path[len(root) + 1:])
        if found is not None:
            out[found[0]] += 1
            out["bytes"] += int(info.get("size") or 0)
    return out



@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_retention_keeps_the_state_objects_bounded(spark, kafka, topic, s3, s3_url,
                                                   tmp_path) -> None:
    name = topic(partitions=PARTITIONS)
    for p in range(PARTITIONS):
        kafka.produce(name, [(f"k{p}-{i % KEYS}", b"x" * 64)
                             for i in range((BATCHES + 1) * PER_BATCH)], p)

    def frames(i: int) -> Any:
        return kafka_batch(spark, kafka.bootstrap, name,
                           {p: (PER_BATCH * i, PER_BATCH * (i + 1)) for p in range(PARTITIONS)})

    def processor(url: str, local: str, **kwargs: Any) -> OrderedStateful:
        return OrderedStateful(count_updates, state_location=f"{url}/state",
                               output=f"{url}/out", output_schema=SCHEMA,
                               storage_options=s3.storage_options,
                               store_options={"local_dir": str(tmp_path / local)}, **kwargs)

    figures: dict[str, Any] = {"partitions": PARTITIONS, "batches": BATCHES,
                               "records_per_partition_batch": PER_BATCH,
                               "keys_per_partition": KEYS}
    # Run A: no automatic cleanup (what happened before retention existed).
    plain = processor(f"{s3_url}-a", "a", cleanup_interval_batches=None)
    for i in range(BATCHES):
        plain.process_batch(frames(i), i)
    figures["no_cleanup"] = _objects(plain)
    for keep in (10, 1):
        result = plain.cleanup_state(keep_batches=keep)
        figures[f"after_cleanup_keep_{keep}"] = {**_objects(plain),
                                                 "deleted": result.deleted}
    assert figures["after_cleanup_keep_10"]["manifests"] == PARTITIONS * 10
    assert figures["after_cleanup_keep_1"]["manifests"] == PARTITIONS
    # Restart on an empty local dir from the latest record only: state is complete.
    fresh = processor(f"{s3_url}-a", "a-fresh")
    last = fresh.process_batch(frames(BATCHES), BATCHES)
    assert last.restores == PARTITIONS
    out = fresh.table().to_arrow()
    assert out.num_rows == PARTITIONS * PER_BATCH * (BATCHES + 1)
    seen = -(-(BATCHES + 1) * PER_BATCH // KEYS)  # the most often updated key's count
    assert pc.min(out["count"]).as_py() == 1 and pc.max(out["count"]).as_py() == seen
    total = sum(v for p in range(PARTITIONS) for _, v in fresh.read_state(name, p))
    assert total == PARTITIONS * PER_BATCH * (BATCHES + 1)

    # Run B: automatic cleanup every 5 batches keeping 10 (same data).
    auto = processor(f"{s3_url}-b", "b", keep_batches=10, cleanup_interval_batches=5,
                     cleanup_in_background=False)  # each cleanup's result in its batch
    cleanups = []
    for i in range(BATCHES):
        result = auto.process_batch(frames(i), i)
        if result.cleanup is not None:
            cleanups.append(result.cleanup)
    figures["auto_keep_10_every_5"] = {
        **_objects(auto), "cleanups": len(cleanups),
        "deleted": sum(c.deleted for c in cleanups)}
    assert len(cleanups) == BATCHES // 5
    assert auto.table().to_arrow().num_rows == PARTITIONS * PER_BATCH * BATCHES
    text = json.dumps(figures, indent=1, sort_keys=True)
    print(text)
    if os.environ.get("RETENTION_FIGURES"):
        with open(os.environ["RETENTION_FIGURES"], "w") as handle:
            handle.write(text)
    assert figures["auto_keep_10_every_5"]["manifests"] < figures["no_cleanup"]["manifests"]
    # bounded: the kept batches plus those since the last cleanup, per partition
    assert figures["auto_keep_10_every_5"]["manifests"] <= PARTITIONS * (10 + 5)
