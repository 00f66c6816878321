"""The stream reader's driver hooks called directly against the real broker (no Spark):
discovery, integrity checks, admission control, AvailableNow, lag and broker outages."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from orderedstream.core.errors import DataLossError, KafkaUnavailableError
from orderedstream.core.sparkcompat import ReadAllAvailable, ReadMaxRows, ReadMinRows
from orderedstream.python_datasource.offsets import KafkaSourceOffset
from orderedstream.python_datasource.options import parse_options
from orderedstream.python_datasource.source import OrderedKafkaStreamReader


def reader(bootstrap: str, **options: Any) -> OrderedKafkaStreamReader:
    opts = {"kafka.bootstrap.servers": bootstrap, **{k: str(v) for k, v in options.items()}}
    return OrderedKafkaStreamReader(parse_options(opts, streaming=True))


def delete_records(kafka: Any, name: str, partition: int, before: int) -> None:
    """Advance the log start offset (what retention does) to ``before``."""
    futures = kafka.admin().delete_records([TopicPartition(name, partition, before)])
    for future in futures.values():
        future.result(30)


def test_admission_control_splits_by_backlog(kafka: Any, topic: Any) -> None:
    name = topic(partitions=2)
    kafka.produce(name, [(None, b"x")] * 90, partition=0)
    kafka.produce(name, [(None, b"y")] * 10, partition=1)
    r = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest",
               maxOffsetsPerTrigger=20)
    start = r.initialOffset()
    assert r.getDefaultReadLimit() == ReadMaxRows(20)
    end = r.latestOffset(start, ReadMaxRows(20))
    assert end["offsets"] == {name: {"0": 18, "1": 2}}  # 20 split 90:10
    ranges = [p.range for p in r.partitions(start, end)]
    assert [(x.partition, x.start, x.end) for x in ranges] == [(0, 0, 18), (1, 0, 2)]
    # ReadAllAvailable (Trigger.Once) ignores the option limits
    assert r.latestOffset(end, ReadAllAvailable())["offsets"] == {name: {"0": 90, "1": 10}}
    # the lag: reportLatestOffset shows the log end
    assert r.reportLatestOffset()["offsets"] == {name: {"0": 90, "1": 10}}


def test_min_offsets_per_trigger_waits_until_enough_or_delay(kafka: Any, topic: Any) -> None:
    name = topic(partitions=1)
    kafka.produce(name, [(None, b"x")] * 5)
    r = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest",
               minOffsetsPerTrigger=10, maxTriggerDelay="1h")
    start = r.initialOffset()
    assert r.getDefaultReadLimit() == ReadMinRows(10)
    assert r.latestOffset(start, ReadMinRows(10)) == start  # 5 < 10: skip this trigger
    kafka.produce(name, [(None, b"x")] * 5)
    assert r.latestOffset(start, ReadMinRows(10))["offsets"] == {name: {"0": 10}}
    r2 = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest",
                minOffsetsPerTrigger=100, maxTriggerDelay="0s")
    s2 = r2.initialOffset()
    assert r2.latestOffset(s2, ReadMinRows(100))["offsets"] == {name: {"0": 10}}  # delay passed


def test_available_now_stops_at_target(kafka: Any, topic: Any) -> None:
    name = topic(partitions=1)
    kafka.produce(name, [(None, b"x")] * 10)
    r = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest",
               maxOffsetsPerTrigger=4)
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    kafka.produce(name, [(None, b"late")] * 10)
    ends = []
    while True:
        end = r.latestOffset(start, ReadMaxRows(4))
        if end == start:
            break
        ends.append(end["offsets"][name]["0"])
        start = end
    assert ends == [4, 8, 10]


def test_new_topic_and_partition_start_at_earliest(kafka: Any, topic: Any) -> None:
    prefix = topic(partitions=1, prefix="disc")  # a unique name used as the pattern prefix
    first = f"{prefix}-a"
    kafka.create_topic(first, 1)
    kafka.produce(first, [(None, b"x")] * 3)
    r = reader(kafka.bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="latest")
    start = r.initialOffset()
    assert start["offsets"] == {first: {"0": 3}}
    second = f"{prefix}-b"
    kafka.create_topic(second, 2)
    kafka.produce(second, [(None, b"y")] * 4, partition=1)
    kafka.add_partitions(first, 2)
    kafka.produce(first, [(None, b"z")] * 2, partition=1)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {first: {"0": 3, "1": 2}, second: {"0": 0, "1": 4}}
    assert end["newPartitions"] == {first: {"1": 0}, second: {"0": 0, "1": 0}}
    got = {(x.topic, x.partition): (x.start, x.end) for x in
           (p.range for p in r.partitions(start, end))}
    assert got == {(first, 1): (0, 2), (second, 1): (0, 4)}


def test_strict_fails_on_retention_loss_window_counts_it(kafka: Any, topic: Any) -> None:
    name = topic(partitions=1)
    kafka.produce(name, [(None, b"x")] * 20)
    strict = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest")
    start = strict.initialOffset()
    delete_records(kafka, name, 0, 12)
    with pytest.raises(DataLossError, match=rf"{name}-0 offsets \[0, 12\).*retention"):
        strict.latestOffset(start, ReadAllAvailable())
    window = reader(kafka.bootstrap, subscribe=name, integrity="window")
    end = window.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {name: {"0": 20}}
    assert end["loss"] == {"events": 1, "records": 12}


def test_topic_recreated_is_detected_by_topic_id(kafka: Any, topic: Any) -> None:
    name = topic(partitions=1)
    kafka.produce(name, [(None, b"x")] * 5)
    strict = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest")
    start = strict.initialOffset()
    start = strict.latestOffset(start, ReadAllAvailable())  # read all 5
    kafka.delete_topic(name)
    kafka.create_topic(name, 1)
    kafka.produce(name, [(None, b"n")] * 7)  # offsets go up again: only the id tells
    with pytest.raises(DataLossError, match="recreated"):
        reader(kafka.bootstrap, subscribe=name).latestOffset(start, ReadAllAvailable())
    window = reader(kafka.bootstrap, subscribe=name, integrity="window")
    end = window.latestOffset(start, ReadAllAvailable())
    assert end["topicIds"][name] != start["topicIds"][name]
    assert end["newPartitions"] == {name: {"0": 0}}
    ranges = [p.range for p in window.partitions(start, end)]
    assert [(x.start, x.end) for x in ranges] == [(0, 7)]


def test_topic_deleted_fails_strict(kafka: Any, topic: Any) -> None:
    name = topic(partitions=2)
    strict = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest")
    start = strict.initialOffset()
    kafka.delete_topic(name)
    with pytest.raises(DataLossError, match=rf"{name}-0.*deleted"):
        strict.latestOffset(start, ReadAllAvailable())
    end = reader(kafka.bootstrap, subscribe=name, failOnDataLoss="false").latestOffset(
        start, ReadAllAvailable())
    assert end["offsets"] == {} and end["loss"]["events"] == 2


def test_new_partition_not_starting_at_zero_is_loss(kafka: Any, topic: Any) -> None:
    name = topic(partitions=1)
    strict = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest")
    start = strict.initialOffset()
    kafka.add_partitions(name, 2)
    kafka.produce(name, [(None, b"x")] * 6, partition=1)
    delete_records(kafka, name, 1, 4)
    with pytest.raises(DataLossError, match=rf"{name}-1 offsets \[0, 4\).*new partition"):
        strict.latestOffset(start, ReadAllAvailable())


def test_commit_offsets_to_consumer_group(kafka: Any, topic: Any) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    name = topic(partitions=1)
    kafka.produce(name, [(None, b"x")] * 8)
    group = f"lag-{name}"
    r = reader(kafka.bootstrap, subscribe=name, startingOffsets="earliest",
               commitOffsetsToGroup=group)
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    r.commit(end)
    result = kafka.admin().list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert [(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions] == \
        [(name, 0, 8)]
    r.stop()


def test_broker_down_waits_then_fails_clearly(make_kafka: Any) -> None:
    broker = make_kafka()
    broker.create_topic("down", 1)
    r = reader(broker.bootstrap, subscribe="down", startingOffsets="earliest",
               brokerTimeoutMs=4000)
    start = r.initialOffset()
    broker.kill()
    with pytest.raises(KafkaUnavailableError, match=broker.bootstrap):
        r.latestOffset(start, ReadAllAvailable())
    broker.restart()
    assert KafkaSourceOffset.from_json(r.latestOffset(start, ReadAllAvailable())).offsets == \
        {"down": {0: 0}}


def test_assign_of_a_partition_that_does_not_exist_is_refused(kafka: Any, topic: Any) -> None:
    """Spark's source fails listing the offsets of an assigned partition the cluster lacks;
    it used to be left out silently (a typo read nothing)."""
    from orderedstream.core.errors import OptionError

    name = topic(partitions=2)
    kafka.produce(name, [(None, b"x")] * 4, partition=0)
    good = reader(kafka.bootstrap, assign=f'{{"{name}": [0, 1]}}', startingOffsets="earliest")
    assert good.initialOffset()["offsets"] == {name: {"0": 0, "1": 0}}
    for assign, shown in ((f'{{"{name}": [0, 7]}}', f"{name}-7, which .* \\({name} has "
                                                    "partitions \\[0\\]\\)"),
                          (f'{{"{name}-typo": [0]}}', f"{name}-typo-0, .*topic '{name}-typo' "
                                                      "does not exist")):
        with pytest.raises(OptionError, match=f"option 'assign' names {shown}"):
            reader(kafka.bootstrap, assign=assign, startingOffsets="earliest").initialOffset()
