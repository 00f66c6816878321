"""A task's Kafka ranges run two at once (``statestore.ordered.inflight``): results in input
order, the user function never called concurrently, nothing left running after an error or
an early close, and a whole batch still exactly once and in order on real Kafka, S3 and Spark.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from orderedstream.core.errors import OptionError
from orderedstream.statestore.ordered import OrderedStateful
from orderedstream.statestore.ordered.inflight import (
    IN_FLIGHT_ENV,
    LIGHT_RANGE_RECORDS,
    exclusive,
    in_order,
    light_range,
    partitions_in_flight,
)
from tests.statestore.ordered.order_check import ORDER_SCHEMA

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.unit
def test_results_come_in_input_order_with_two_in_flight() -> None:
    running: list[int] = []
    most = 0
    guard = threading.Lock()

    def work(item: int) -> int:
        nonlocal most
        with guard:
            running.append(item)
            most = max(most, len(running))
        time.sleep(0.02 if item % 2 == 0 else 0.001)  # later items finish first
        with guard:
            running.remove(item)
        return item * 10

    assert list(in_order(work, range(7), depth=2)) == [i * 10 for i in range(7)]
    assert most == 2
    assert list(in_order(work, range(3), depth=1)) == [0, 10, 20]


@pytest.mark.unit
def test_a_large_range_runs_alone() -> None:
    running: list[int] = []
    seen: list[tuple[int, ...]] = []
    guard = threading.Lock()

    def work(item: int) -> int:
        with guard:
            running.append(item)
            seen.append(tuple(sorted(running)))
        time.sleep(0.01)
        with guard:
            running.remove(item)
        return item

    large = {2, 5}
    assert list(in_order(work, range(8), depth=2, light=lambda i: i not in large)) \
        == list(range(8))
    assert all(len(s) == 1 for s in seen if large & set(s))  # nothing ran beside 2 or 5
    assert any(len(s) == 2 for s in seen)  # the small ones did run two at a time
    assert light_range(type("R", (), {"start": 0, "end": LIGHT_RANGE_RECORDS})()) is True
    assert light_range(type("R", (), {"start": 5, "end": LIGHT_RANGE_RECORDS + 6})()) is False


@pytest.mark.unit
def test_an_error_waits_for_the_work_in_flight_and_starts_nothing_after_it() -> None:
    started: list[int] = []
    finished: list[int] = []

    def work(item: int) -> int:
        started.append(item)
        if item == 1:
            raise ValueError("partition 1 failed")
        time.sleep(0.05)
        finished.append(item)
        return item

    results = in_order(work, range(6), depth=2)
    assert next(results) == 0
    with pytest.raises(ValueError, match="partition 1 failed"):
        next(results)
    # whatever had started (item 2 at most, submitted ahead) finished before the raise
    assert set(started) - {1} == set(finished) and max(started) <= 2


@pytest.mark.unit
def test_closing_early_leaves_no_work_running() -> None:
    finished: list[int] = []

    def work(item: int) -> int:
        time.sleep(0.05)
        finished.append(item)
        return item

    results = in_order(work, range(10), depth=2)
    assert next(results) == 0
    results.close()  # what Spark does with a task's iterator it stops reading
    # the one in flight finished (0 and 1 run side by side: either may end first); no other
    assert sorted(finished) == [0, 1]
    assert not [t for t in threading.enumerate() if t.name.startswith("orderedstream-partition")]


@pytest.mark.unit
def test_exclusive_steps_never_overlap() -> None:
    inside = 0
    most = 0
    guard = threading.Lock()

    def steps(n: int) -> Any:
        nonlocal inside, most
        for i in range(n):
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.002)  # the GIL is released here, as around I/O in a partition
            with guard:
                inside -= 1
            yield i

    threads = [threading.Thread(target=lambda: list(exclusive(steps(20)))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1


@pytest.mark.unit
def test_partitions_in_flight_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IN_FLIGHT_ENV, raising=False)
    assert partitions_in_flight() == 2
    monkeypatch.setenv(IN_FLIGHT_ENV, "1")
    assert partitions_in_flight() == 1
    for bad in ("0", "two", "17", "1.5"):
        monkeypatch.setenv(IN_FLIGHT_ENV, bad)
        with pytest.raises(OptionError, match=f"{IN_FLIGHT_ENV}='{bad}': a whole number"):
            partitions_in_flight()


_CALLS = {"inside": 0}


def one_at_a_time(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    """The order check, refusing a call made while another one is running in this worker."""
    _CALLS["inside"] += 1
    try:
        if _CALLS["inside"] != 1:
            raise AssertionError("the user function was called concurrently")
        time.sleep(0)  # give another thread the GIL, as real work would
        seq = int(record["value"])
        previous = state.get_option(-1)
        state.update(seq)
        return [(key, record["partition"], record["offset"], seq,
                 0 if seq == previous + 1 else 1)]
    finally:
        _CALLS["inside"] -= 1


def test_one_task_runs_its_ranges_two_at_a_time_exactly_once(spark, kafka, topic, s3, s3_url,
                                                              tmp_path) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    name = topic(partitions=6)
    keys, per_key = 60, 20
    records = [(f"k{i % keys}".encode(), str(i // keys).encode()) for i in range(keys * per_key)]
    assert kafka.produce(name, records) == len(records)
    proc = OrderedStateful(one_at_a_time, state_location=f"{s3_url}/state",
                           output=f"{s3_url}/out", output_schema=ORDER_SCHEMA,
                           storage_options=s3.storage_options,
                           store_options={"local_dir": str(tmp_path / "local")}, max_tasks=1)
    frame = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
             .option("startingOffsets", "earliest").option("emit", "ranges").load())
    results = []
    query = (frame.writeStream.foreachBatch(lambda df, b: results.append(proc.process_batch(df, b)))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    (result,) = [r for r in results if r.records]
    assert len(result.commits) == 6 and len({c.task_attempt for c in result.commits}) == 1
    # the one task's partitions ran in overlapping windows (two in flight), each whole
    spans = sorted((c.metrics["started_at"], c.metrics["started_at"] + c.metrics["open_s"]
                    + c.metrics["process_s"] + c.metrics["commit_s"]) for c in result.commits)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))
    out = proc.table().to_arrow()
    assert out.num_rows == len(records) and pc.sum(out["violation"]).as_py() == 0
    seen = set(zip(out["partition"].to_pylist(), out["offset"].to_pylist(), strict=True))
    assert len(seen) == len(records)  # every record once: none lost, none duplicated
