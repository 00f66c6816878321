"""Spark's string options for ``orderedkafka``, parsed once into a frozen, validated dataclass.

Option names and meanings follow Spark's Kafka source (spark-sql-kafka-0-10), with a few of
our own. Every error names the option and what it accepts. ``kafka.*`` client settings are
translated by ``client_config``, which keeps their secret values apart (never in ``repr``).
Parsed on the driver; the parsed object is plain data that Spark pickles to executors.
"""

from __future__ import annotations

import difflib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from orderedstream.core.errors import InvariantError, OptionError
from orderedstream.core.units import parse_duration_ms
from orderedstream.python_datasource.client_config import KafkaSecrets, is_secret, kafka_settings

Integrity = Literal["strict", "window", "none"]
Strategy = Literal["assign", "subscribe", "subscribePattern"]
StartKind = Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]

EARLIEST = -2  # Spark's sentinel in startingOffsets / endingOffsets JSON
LATEST = -1

# Source options, lower-cased -> the spelling users know (for error messages).
_SOURCE_OPTIONS = {
    name.lower(): name
    for name in (
        "assign", "subscribe", "subscribePattern",
        "startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp",
        "startingOffsetsByTimestampStrategy",
        "endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp",
        "failOnDataLoss", "integrity",
        "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
        "minPartitions", "maxRecordsPerPartition", "includeHeaders",
        "groupIdPrefix", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
        "kafkaConsumer.pollTimeoutMs",
        "topicDiscoveryIntervalMs", "commitOffsetsToGroup", "brokerTimeoutMs",
        "arrowBatchMaxRecords", "arrowBatchMaxBytes", "emit", "rangePartitions", "reader",
        "kafkaConsumer.cacheCapacity", "kafkaConsumer.cacheTimeoutMs",
    )
}

@dataclass(frozen=True, kw_only=True)
class StartSpec:
    """Where reading begins (or, for ``endingOffsets``, ends) per topic-partition.

    ``kind`` earliest/latest apply to every partition; ``offsets`` maps topic -> partition ->
    offset (-2 earliest, -1 latest); ``timestamp`` applies ``timestamp_ms`` to every
    partition; ``timestamps`` maps topic -> partition -> epoch millis."""

    kind: StartKind
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    timestamp_ms: int | None = None
    option: str = "startingOffsets"


@dataclass(frozen=True, kw_only=True)
class OrderedKafkaOptions:
    """Every ``orderedkafka`` option, validated. Built by :func:`parse_options`.

    ``kafka_params`` holds the public librdkafka settings, ``secrets`` the secret ones (their
    ``repr`` is redacted, so this object's is too). ``emit = ranges`` rows carry
    :meth:`without_secrets`; their reader restores the values with :meth:`with_secrets`.
    """

    bootstrap_servers: str
    strategy: Strategy
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    kafka_params: Mapping[str, str] = field(default_factory=dict)
    secrets: KafkaSecrets = field(default_factory=KafkaSecrets)
    starting: StartSpec = StartSpec(kind="latest")
    ending: StartSpec | None = None
    starting_by_timestamp_strategy: Literal["error", "latest"] = "error"
    integrity: Integrity = "strict"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    group_id: str = ""
    poll_timeout_ms: int = 120_000
    topic_discovery_interval_ms: int = 0
    commit_group: str | None = None
    broker_timeout_ms: int = 120_000
    arrow_batch_max_records: int = 10_000
    arrow_batch_max_bytes: int = 16 * 1024 * 1024
    reader: Literal["native", "python", "auto"] = "auto"
    """``native`` (the Rust reader), ``python`` (confluent-kafka) or ``auto`` (native if built)."""
    consumer_cache_capacity: int = 16
    """Idle Kafka consumers a Python worker keeps for the next batches (0: none)."""
    consumer_cache_timeout_ms: int = 5 * 60_000
    """An idle pooled consumer is closed after this long (Spark's cache timeout)."""
    emit: Literal["records", "ranges"] = "records"
    """``ranges``: each row is one task's offset range, read later by the consumer of the
    DataFrame in its own Python worker (``OrderedStateful``), with no JVM hop per record."""
    range_partitions: int | None = None
    """``emit = ranges`` only: the batch's range rows in at most this many input partitions
    (contiguous groups, in planning order), so describing a batch costs that many Spark tasks;
    None: one per range."""

    def __post_init__(self) -> None:
        leaked = sorted(name for name in self.kafka_params if is_secret(name))
        if leaked:
            raise OptionError(f"OrderedKafkaOptions: secret settings {leaked} belong in "
                              "'secrets' (KafkaSecrets), not in 'kafka_params'")

    @property
    def read_committed(self) -> bool:
        """True when the client reads only committed transactional records."""
        return self.kafka_params.get("isolation.level", "read_uncommitted") == "read_committed"

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to this query's subscription (its list, assignment or pattern).

        Parameters
        ----------
        topic
            A topic name.
        """
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "assign":
            return topic in self.assignment
        if self.pattern is None:
            raise InvariantError("OrderedKafkaOptions: strategy 'subscribePattern' without a "
                                 "pattern")
        return re.fullmatch(self.pattern, topic) is not None

    def client_config(self) -> dict[str, str]:
        """librdkafka settings shared by the driver's and the executors' clients, secrets
        included (OptionError naming them when they were dropped and not restored)."""
        return {"bootstrap.servers": self.bootstrap_servers,
                "isolation.level": "read_uncommitted", **self.kafka_params,
                **self.secrets.settings()}

    def without_secrets(self) -> OrderedKafkaOptions:
        """A copy whose secrets keep their names only: what an ``emit = ranges`` row carries."""
        return replace(self, secrets=self.secrets.without_values())

    def with_secrets(self, given: KafkaSecrets) -> OrderedKafkaOptions:
        """A copy with dropped secrets restored from ``given`` (itself when none were dropped);
        ``OptionError`` naming the ``kafka.*`` options ``given`` lacks (names only, never values).

        Parameters
        ----------
        given
            The secrets the reading side was handed (``OrderedStateful(kafka_options=...)``).
        """
        if not self.secrets.dropped:
            return self
        return replace(self, secrets=self.secrets.restored(given))


def _bad(option: str, value: object, accepted: str) -> OptionError:
    return OptionError(f"option '{option}' = {value!r} is invalid: accepted {accepted}")


def _int(opts: Mapping[str, str], key: str, minimum: int = 1) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise _bad(key, raw, f"an integer >= {minimum}") from None
    if value < minimum:
        raise _bad(key, raw, f"an integer >= {minimum}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise _bad(key, raw, "'true' or 'false'")
    return text == "true"


def _duration_ms(opts: Mapping[str, str], key: str, default: int) -> int:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    return parse_duration_ms(str(raw), f"option {key}", allow_zero=True)


def _json_object(option: str, raw: str) -> dict:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _bad(option, raw, f"JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(value, dict) or not value:
        raise _bad(option, raw, "a non-empty JSON object")
    return value


def _partition_map(option: str, raw: str, what: str) -> dict[str, dict[int, int]]:
    """Parse ``{"topic": {"0": 23, "1": -2}}``."""
    result: dict[str, dict[int, int]] = {}
    for topic, parts in _json_object(option, raw).items():
        if not isinstance(parts, dict) or not parts:
            raise _bad(option, raw, f'JSON like {{"topic": {{"0": {what}}}}}')
        result[topic] = {}
        for part, value in parts.items():
            try:
                pid = int(part)
            except ValueError:
                raise _bad(option, raw, f"integer partition numbers (got {part!r} in "
                                        f"topic {topic!r})") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad(option, raw, f"integer {what} (got {value!r} for {topic}-{pid})")
            result[topic][pid] = value
    return result


def _start_spec(opts: Mapping[str, str], prefix: str) -> StartSpec | None:
    """Resolve starting*/ending* options with Spark's precedence: timestamp > by-timestamp >
    offsets."""
    ts_key, by_ts_key, off_key = f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp", \
        f"{prefix}Offsets"
    if opts.get(ts_key.lower()) is not None:
        value = _int(opts, ts_key, minimum=0)
        return StartSpec(kind="timestamp", timestamp_ms=value, option=ts_key)
    raw = opts.get(by_ts_key.lower())
    if raw is not None:
        spec = _partition_map(by_ts_key, str(raw), "epoch milliseconds")
        return StartSpec(kind="timestamps", offsets=spec, option=by_ts_key)
    raw = opts.get(off_key.lower())
    if raw is None:
        return None
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return StartSpec(kind=text.lower(), option=off_key)  # type: ignore[arg-type]
    if not text.startswith("{"):
        close = difflib.get_close_matches(text.lower(), ["earliest", "latest"], n=1)
        raise _bad(off_key, raw, "'earliest', 'latest' or a JSON object of offsets per "
                   'partition, like {"topic": {"0": 23, "1": -2}} (-2 = earliest, -1 = latest)'
                   + (f"; did you mean '{close[0]}'?" if close else ""))
    offsets = _partition_map(off_key, text, "offsets (-2 = earliest, -1 = latest)")
    for topic, parts in offsets.items():
        for pid, off in parts.items():
            if off < EARLIEST:
                raise _bad(off_key, raw, f"offsets >= 0, or -2 (earliest) / -1 (latest); "
                                         f"got {off} for {topic}-{pid}")
    return StartSpec(kind="offsets", offsets=offsets, option=off_key)


def _batch_range(opts: Mapping[str, str], starting: StartSpec,
                 ending: StartSpec | None) -> StartSpec:
    """Batch reads: a start that is not 'latest', an end (default latest) not 'earliest'."""
    if starting.kind == "latest":
        raise _bad("startingOffsets", "latest",
                   "'earliest' or JSON offsets for batch queries (not 'latest')")
    if starting.kind == "offsets" and any(
            o == LATEST for parts in starting.offsets.values() for o in parts.values()):
        raise _bad("startingOffsets", opts.get("startingoffsets"),
                   "offsets >= 0 or -2 (earliest) for batch queries; -1 (latest) is not "
                   "allowed")
    if ending is None:
        return StartSpec(kind="latest", option="endingOffsets")
    if ending.kind == "earliest":
        raise _bad("endingOffsets", "earliest",
                   "'latest' or JSON offsets for batch queries (not 'earliest')")
    if ending.kind == "offsets" and any(
            o == EARLIEST for parts in ending.offsets.values() for o in parts.values()):
        raise _bad("endingOffsets", opts.get("endingoffsets"),
                   "offsets >= 0 or -1 (latest) for batch queries; -2 (earliest) is not "
                   "allowed")
    return ending


def unknown_option_message(key: str) -> str:
    """What an unknown ``orderedkafka`` option is told: a dotted name its ``kafka.``-prefixed
    form, a misspelled source option the closest one (difflib); then what is accepted.

    Parameters
    ----------
    key
        The unknown option, lower-cased.
    """
    close = difflib.get_close_matches(key, list(_SOURCE_OPTIONS), n=1, cutoff=0.75)
    if close:
        hint = f" (did you mean '{_SOURCE_OPTIONS[close[0]]}'?)"
    elif "." in key:
        hint = (f" (a Kafka client setting takes the prefix 'kafka.': did you mean "
                f"'kafka.{key}'?)")
    else:
        hint = ""
    return (f"unknown option '{key}' for format 'orderedkafka'{hint}: accepted are "
            f"{', '.join(sorted(_SOURCE_OPTIONS.values()))} and kafka.* client settings")


def parse_options(options: Mapping[str, str], *, streaming: bool | None) -> OrderedKafkaOptions:
    """Validate Spark's case-insensitive options once into :class:`OrderedKafkaOptions`
    (with a new consumer group id unless ``kafka.group.id`` is given).

    Parameters
    ----------
    options
        The reader's options as Spark passes them (strings; None values ignored).
    streaming
        Stream (True) or batch (False) defaults and rules; None checks only what both modes
        share (``load()``, where Spark does not say which) and gives stream defaults.

    Raises
    ------
    OptionError
        An option is unknown, malformed or conflicts with another, naming it and what it accepts.
    """
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    for key in opts:  # Spark's option names are case-insensitive: shown lower-cased
        if key.startswith("kafka.") or key in _SOURCE_OPTIONS or key == "path":
            continue
        raise OptionError(unknown_option_message(key))

    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap or not str(bootstrap).strip():
        raise OptionError("option 'kafka.bootstrap.servers' must be set: a comma-separated list "
                          "of host:port")

    given = [name for name in ("assign", "subscribe", "subscribePattern")
             if opts.get(name.lower()) is not None]
    if len(given) != 1:
        raise OptionError("exactly one of the options 'assign', 'subscribe', 'subscribePattern' "
                          f"must be set; got {given or 'none'}")
    strategy: Strategy = given[0]  # type: ignore[assignment]
    raw = str(opts[strategy.lower()])
    topics: tuple[str, ...] = ()
    pattern = None
    assignment: dict[str, tuple[int, ...]] = {}
    if strategy == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise _bad("subscribe", raw, "a comma-separated list of topic names")
    elif strategy == "subscribePattern":
        if not raw.strip():
            raise _bad("subscribePattern", raw, "a non-empty regular expression")
        try:
            re.compile(raw)
        except re.error as exc:
            raise _bad("subscribePattern", raw, f"a regular expression ({exc})") from None
        pattern = raw.strip()
    else:
        for topic, parts in _json_object("assign", raw).items():
            if (not isinstance(parts, list) or not parts
                    or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                               for p in parts)):
                raise _bad("assign", raw, 'JSON like {"topicA": [0, 1], "topicB": [2]}')
            assignment[topic] = tuple(sorted(set(parts)))

    starting = (_start_spec(opts, "starting")
                or StartSpec(kind="earliest" if streaming is False else "latest",
                             option="startingOffsets"))
    ending = _start_spec(opts, "ending")
    if streaming is True and ending is not None:
        raise OptionError(f"option '{ending.option}' is not valid in streaming queries: it "
                          "applies to batch reads (spark.read) only")
    if streaming is False:
        ending = _batch_range(opts, starting, ending)

    ts_strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if ts_strategy not in ("error", "latest"):
        raise _bad("startingOffsetsByTimestampStrategy", ts_strategy, "'error' or 'latest'")

    fail_on_loss = _bool(opts, "failOnDataLoss", True)
    raw_integrity = opts.get("integrity")
    if raw_integrity is None:
        integrity: Integrity = "strict" if fail_on_loss else "window"
    else:
        text = str(raw_integrity).strip().lower()
        if text not in ("strict", "window", "none"):
            raise _bad("integrity", raw_integrity, "'strict', 'window' or 'none'")
        integrity = text  # type: ignore[assignment]
        if integrity == "strict" and not fail_on_loss:
            raise OptionError("option 'failOnDataLoss' = 'false' contradicts 'integrity' = "
                              "'strict'; use integrity 'window' or 'none' to continue past loss")

    max_per = _int(opts, "maxOffsetsPerTrigger")
    min_per = _int(opts, "minOffsetsPerTrigger")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError(f"option 'minOffsetsPerTrigger' ({min_per}) must not exceed "
                          f"'maxOffsetsPerTrigger' ({max_per})")
    min_parts = _int(opts, "minPartitions")
    max_records = _int(opts, "maxRecordsPerPartition")
    if integrity != "none":
        for name, value in (("minPartitions", min_parts),
                            ("maxRecordsPerPartition", max_records)):
            if value is not None:
                raise OptionError(
                    f"option '{name}' splits a Kafka partition's range over several tasks, which "
                    f"integrity '{integrity}' forbids (one task per partition, in order); set "
                    "integrity 'none' to allow splitting")

    _int(opts, "fetchOffset.numRetries", minimum=0)  # accepted for parity; brokerTimeoutMs
    _int(opts, "fetchOffset.retryIntervalMs", minimum=0)  # bounds our retries instead
    kafka_params, secrets = kafka_settings(opts)
    group_prefix = str(opts.get("groupidprefix", "spark-kafka-source"))
    group_id = kafka_params.pop("group.id", None) or f"{group_prefix}-{uuid.uuid4()}"
    emit = str(opts.get("emit", "records")).strip().lower()
    if emit not in ("records", "ranges"):
        raise _bad("emit", opts.get("emit"), "'records' (Kafka rows) or 'ranges' (one row per "
                   "task's offset range, for OrderedStateful)")
    range_parts = _int(opts, "rangePartitions")
    if range_parts is not None and emit != "ranges":
        raise _bad("rangePartitions", opts.get("rangepartitions"),
                   "only with emit 'ranges' (a positive number of input partitions holding "
                   "the batch's range rows); remove it for emit 'records'")
    reader = str(opts.get("reader", "auto")).strip().lower()
    if reader not in ("native", "python", "auto"):
        raise _bad("reader", opts.get("reader"), "'auto' (native when built, else python), "
                   "'native' (Rust/librdkafka, orderedstream._kafka_native) or 'python' "
                   "(confluent-kafka)")
    cache_capacity = _int(opts, "kafkaConsumer.cacheCapacity", minimum=0)
    commit_group = opts.get("commitoffsetstogroup")
    if commit_group is not None and not str(commit_group).strip():
        raise _bad("commitOffsetsToGroup", commit_group, "a non-empty consumer group id")

    return OrderedKafkaOptions(
        bootstrap_servers=str(bootstrap).strip(),
        strategy=strategy, topics=topics, pattern=pattern, assignment=assignment,
        kafka_params=kafka_params, secrets=secrets, starting=starting, ending=ending,
        starting_by_timestamp_strategy=ts_strategy,  # type: ignore[arg-type]
        integrity=integrity,
        max_offsets_per_trigger=max_per, min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60_000),
        min_partitions=min_parts, max_records_per_partition=max_records,
        include_headers=_bool(opts, "includeHeaders", False),
        group_id=group_id,
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
        topic_discovery_interval_ms=_int(opts, "topicDiscoveryIntervalMs", minimum=0) or 0,
        commit_group=str(commit_group).strip() if commit_group is not None else None,
        broker_timeout_ms=_int(opts, "brokerTimeoutMs") or 120_000,
        arrow_batch_max_records=_int(opts, "arrowBatchMaxRecords") or 10_000,
        arrow_batch_max_bytes=_int(opts, "arrowBatchMaxBytes") or 16 * 1024 * 1024,
        emit=emit,  # type: ignore[arg-type]
        range_partitions=range_parts,
        reader=reader,  # type: ignore[arg-type]
        consumer_cache_capacity=16 if cache_capacity is None else cache_capacity,
        consumer_cache_timeout_ms=_int(opts, "kafkaConsumer.cacheTimeoutMs") or 5 * 60_000,
    )
