"""Option parsing: Spark's names and meanings, rejections, and errors that say what is accepted."""

from __future__ import annotations

import pytest

from orderedstream.core.errors import OptionError
from orderedstream.python_datasource.options import parse_options

BASE = {"kafka.bootstrap.servers": "h:9092"}


def parse(streaming: bool = True, **options: str):  # type: ignore[no-untyped-def]
    return parse_options({**BASE, **options}, streaming=streaming)


def test_defaults_follow_sparks_kafka_source() -> None:
    o = parse(subscribe="a, b")
    assert o.topics == ("a", "b") and o.starting.kind == "latest"
    assert o.integrity == "strict" and not o.include_headers and not o.read_committed
    assert o.max_trigger_delay_ms == 15 * 60_000
    assert parse(streaming=False, subscribe="a").ending.kind == "latest"
    assert parse(streaming=False, subscribe="a").starting.kind == "earliest"
    assert parse(subscribe="a", failOnDataLoss="false").integrity == "window"


def test_starting_precedence_and_json() -> None:
    o = parse(subscribe="a", startingOffsets='{"a": {"0": 5, "1": -2}}',
              startingOffsetsByTimestamp='{"a": {"0": 1000}}')
    assert o.starting.kind == "timestamps" and o.starting.offsets == {"a": {0: 1000}}
    o = parse(subscribe="a", startingTimestamp="77", startingOffsets="earliest")
    assert o.starting.kind == "timestamp" and o.starting.timestamp_ms == 77
    o = parse(assign='{"a": [1, 0]}', startingOffsets='{"a": {"0": 5, "1": -2}}')
    assert o.assignment == {"a": (0, 1)} and o.starting.offsets == {"a": {0: 5, 1: -2}}


def test_kafka_passthrough_translates_java_security_settings() -> None:
    o = parse(subscribe="a", **{
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                  'required username="u" password="p";',
        "kafka.ssl.truststore.location": "/ca.pem", "kafka.ssl.truststore.type": "PEM",
        "kafka.max.poll.records": "500", "kafka.group.id": "mine"})
    assert o.kafka_params == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                              "ssl.ca.location": "/ca.pem"}
    assert o.secrets.options == ("kafka.sasl.jaas.config",)
    assert o.client_config()["sasl.username"] == "u"
    assert o.client_config()["sasl.password"] == "p"
    assert o.group_id == "mine"
    java = parse(subscribe="a", **{"kafka.fetch.max.wait.ms": "100",
                                   "kafka.receive.buffer.bytes": "65536"})
    assert java.kafka_params == {"fetch.wait.max.ms": "100",
                                 "socket.receive.buffer.bytes": "65536"}


@pytest.mark.parametrize("options,message", [
    ({}, "exactly one of the options 'assign', 'subscribe', 'subscribePattern'"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one"),
    ({"subscribePattern": "("}, "subscribePattern.*regular expression"),
    ({"assign": '{"a": "0"}'}, "assign.*JSON like"),
    ({"subscribe": "a", "startingOffsets": "first"}, "startingOffsets.*JSON"),
    ({"subscribe": "a", "startingOffsets": "earlist"},
     "'startingOffsets' = 'earlist' is invalid: accepted 'earliest', 'latest' or a JSON "
     "object.*did you mean 'earliest'"),
    ({"subscribe": "a", "startingOffset": "earliest"},
     "unknown option 'startingoffset' .*did you mean 'startingOffsets'"),
    ({"subscribe": "a", "kafka.fetch.max.wait.ms": "1", "kafka.fetch.wait.max.ms": "2"},
     "'kafka.fetch.max.wait.ms' and 'kafka.fetch.wait.max.ms' set the same"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, "integer partition"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "-3"}, "maxOffsetsPerTrigger.*integer >= 1"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "9"},
     "minOffsetsPerTrigger.*must not exceed"),
    ({"subscribe": "a", "maxTriggerDelay": "soon"}, "maxTriggerDelay.*duration"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, "failOnDataLoss.*'true' or 'false'"),
    ({"subscribe": "a", "integrity": "strict", "failOnDataLoss": "false"}, "contradicts"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "commitOffsetsToGroup"),
    ({"subscribe": "a", "kafka.value.deserializer": "x"}, "kafka.value.deserializer"),
    ({"subscribe": "a", "kafka.ssl.truststore.location": "/t.jks"}, "PEM"),
    ({"subscribe": "a", "kafka.isolation.level": "dirty"}, "read_committed"),
    ({"subscribe": "a", "maxRecordsPerPartition": "10"}, "integrity 'none'"),
    ({"subscribe": "a", "bogus": "1"}, "unknown option 'bogus'.*accepted are.*subscribePattern"),
    ({"subscribe": "a", "emit": "rows"}, "emit.*'records'.*'ranges'"),
    ({"subscribe": "a", "rangePartitions": "1"}, "rangePartitions.*only with emit 'ranges'"),
    ({"subscribe": "a", "emit": "ranges", "rangePartitions": "0"},
     "rangePartitions.*integer >= 1"),
])
def test_bad_options_are_named_with_what_is_accepted(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse(**options)


def test_batch_only_rules() -> None:
    with pytest.raises(OptionError, match="endingOffsets.*streaming"):
        parse(subscribe="a", endingOffsets="latest")
    with pytest.raises(OptionError, match="startingOffsets.*not 'latest'"):
        parse(streaming=False, subscribe="a", startingOffsets="latest")
    with pytest.raises(OptionError, match="endingOffsets.*not 'earliest'"):
        parse(streaming=False, subscribe="a", endingOffsets="earliest")
    with pytest.raises(OptionError, match="-2 \\(earliest\\) is not allowed"):
        parse(streaming=False, subscribe="a", endingOffsets='{"a": {"0": -2}}')
    assert parse(subscribe="a", integrity="none", minPartitions="4").min_partitions == 4


def test_load_time_parse_checks_what_both_modes_share() -> None:
    """``streaming=None`` (``schema()`` at load): mode-free rules apply, mode rules wait."""
    assert parse(streaming=None, subscribe="a", endingOffsets="latest").ending is not None
    assert parse(streaming=None, subscribe="a", startingOffsets="latest").starting.kind == \
        "latest"
    with pytest.raises(OptionError, match="integrity"):
        parse(streaming=None, subscribe="a", integrity="paranoid")


def test_option_dataclasses_are_keyword_only() -> None:
    from orderedstream.python_datasource.options import OrderedKafkaOptions, StartSpec

    with pytest.raises(TypeError):
        StartSpec("latest")  # type: ignore[misc]
    with pytest.raises(TypeError):
        OrderedKafkaOptions("h:9092", "subscribe")  # type: ignore[misc]
    assert StartSpec(kind="earliest").option == "startingOffsets"


def test_missing_bootstrap_servers() -> None:
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_options({"subscribe": "a"}, streaming=True)
