"""Replay of an ``OrderedStateful`` streaming query with EVENT-time timeouts (the main job's
tests cover processing time): real Kafka, S3 and Spark; every batch replays identically,
including the one where the watermark expires keys."""

from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

from orderedstream.statestore.ordered import EventTimeTimeout, OrderedStateful
from orderedstream.statestore.ordered.plan import EXTRA_KEY
from orderedstream.statestore.ordered.replay import replay
from tests.fixtures import unique

# Executors cannot import the tests package: the function travels by value (replay, in this
# process, imports it by the name the commit recorded).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def count_until_idle(key: Any, record: dict[str, Any] | None, state: Any) -> Any:
    """Counts a key's records; the key expires 1 s (event time) after its latest record."""
    if record is None:
        n = state.get()
        state.remove()
        return [{"key": key, "status": "expired", "n": n}]
    n = state.get_option(0) + 1
    state.update(n)
    stamp = record["timestamp"]
    ms = int(stamp.timestamp() * 1000) if isinstance(stamp, datetime.datetime) else int(stamp)
    state.set_timeout_timestamp(ms + 1000)
    return [{"key": key, "status": f"seen {n}", "n": n}]


def test_event_time_batches_replay_identically(spark: Any, kafka: Any, s3: Any,
                                               tmp_path: Path) -> None:
    name = unique("replayevent")
    kafka.create_topic(name, 1)
    base = s3.url(unique("replayevent"))
    processor = OrderedStateful(
        count_until_idle, state_location=f"{base}/state", output=f"{base}/out",
        output_schema="key binary, status string, n long",
        timeout=EventTimeTimeout(0), storage_options=s3.storage_options,
        columns=["key", "timestamp"])
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> None:
        query = (spark.readStream.format("orderedkafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "6")
                 .load().writeStream.foreachBatch(processor.process_batch)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    kafka.produce(name, [(f"k{i % 4}", str(i)) for i in range(12)])
    run()
    time.sleep(2.5)  # event time moves on: k0's new records pass the others' timeouts
    kafka.produce(name, [("k0", str(i)) for i in range(5)])
    run()
    latest = processor.log.latest()
    assert latest is not None and latest >= 2
    timed_out = 0
    for batch_id in range(latest + 1):
        task = processor.log.get(batch_id).extra[EXTRA_KEY]["tasks"].get(f"{name}/0")
        result = replay(output=f"{base}/out", state=f"{base}/state", checkpoint=checkpoint,
                        topic=name, partition=0, first=batch_id,
                        bootstrap_servers=kafka.bootstrap, storage_options=s3.storage_options,
                        scratch=str(tmp_path / f"replay-{batch_id}"))
        assert result.identical, (batch_id, result.output.first, result.state.first)
        assert result.batches[0].timeouts == (task["timeouts"] if task else 0)
        timed_out += result.batches[0].timeouts
    assert timed_out == 3  # k1, k2, k3 expired by k0's later event time
