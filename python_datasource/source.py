"""The ``orderedkafka`` Python Data Source: what Spark calls (thin; the work is elsewhere).

Usage::

    df = (spark.readStream.format("orderedkafka")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribePattern", "sessions-.*")
          .load())

Every record of every matching topic-partition is delivered exactly once per successful batch, each
partition's range read by one task in offset order (integrity 'strict' and 'window'). Schema
and options follow Spark's Kafka source; batch reads (``spark.read``) take ``endingOffsets``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from orderedstream.core.errors import InvariantError, OptionError
from orderedstream.core.pandaslazy import keep_pandas_lazy
from orderedstream.core.sparkcompat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
    require,
)
from orderedstream.core.worker_errors import reason_first_in_worker, reason_first_in_worker_iter
from orderedstream.python_datasource.driver_state import DriverState
from orderedstream.python_datasource.kafka_metadata import TP, TopicInfo, resolve_spec
from orderedstream.python_datasource.offsets import KafkaSourceOffset
from orderedstream.python_datasource.options import OrderedKafkaOptions, parse_options
from orderedstream.python_datasource.planning import (
    OffsetRange,
    advance,
    backlog,
    enforce,
    plan_ranges,
    rate_limit,
)
from orderedstream.python_datasource.ranges import describe, range_schema
from orderedstream.python_datasource.refused import RefusedStreamReader

if TYPE_CHECKING:  # pyarrow and the reader are imported by the tasks that read (_read), not
    import pyarrow as pa  # by load()'s schema step or the lookup (core.entrypoint)

log = logging.getLogger(__name__)


def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (all fields nullable, as Spark declares them).

    Parameters
    ----------
    include_headers
        Whether to add the ``headers`` column (option ``includeHeaders``)."""
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


class KafkaInputPartition(InputPartition):
    """One task's work: an :class:`OffsetRange` (plain data, pickled to the executor)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


class KafkaRangesPartition(InputPartition):
    """``emit = ranges`` with ``rangePartitions``: one task describing several ranges."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


def _input_partitions(ranges: Sequence[OffsetRange], options: OrderedKafkaOptions,
                      ) -> list[InputPartition]:
    """One input partition per range, or (``emit = ranges`` + ``rangePartitions`` = n) the
    ranges in at most n contiguous groups: a range row costs nothing to describe, so a task
    per Kafka partition would only add Spark's per-task cost."""
    groups = options.range_partitions
    if options.emit != "ranges" or groups is None or not ranges:
        return [KafkaInputPartition(r) for r in ranges]
    size = -(-len(ranges) // groups)
    return [KafkaRangesPartition(ranges[i:i + size]) for i in range(0, len(ranges), size)]


def _nested(offsets: Mapping[TP, int]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in offsets.items():
        out.setdefault(topic, {})[partition] = offset
    return out


class OrderedKafkaStreamReader(DriverState, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Its driver calls run in Spark's one long-lived Python planner worker
    (the admin client and topic cache are reused); ``read`` runs on a pickled copy (options)."""

    def __init__(self, options: OrderedKafkaOptions) -> None:
        self.options = options
        self._metadata = None
        self._topics: dict[str, TopicInfo] | None = None
        self._topics_at = 0.0
        self._target: dict[TP, int] | None = None
        self._last_trigger = time.monotonic()
        self._latest: dict[TP, int] | None = None
        self._prev: dict | None = None  # the last end planned (Spark 4.0/4.1 pass no start)

    # -- driver --------------------------------------------------------------------------
    def _current_topics(self) -> dict[str, TopicInfo]:
        """The subscription's topics, re-discovered every trigger or every
        ``topicDiscoveryIntervalMs``."""
        now = time.monotonic()
        interval = self.options.topic_discovery_interval_ms / 1000
        if self._topics is None or now - self._topics_at >= interval:
            self._topics = self.metadata.topics()
            self._topics_at = now
        return self._topics

    @reason_first_in_worker
    def initialOffset(self) -> dict:
        """Driver: offsets of the first batch from startingOffsets* (new query only)."""
        topics = self._current_topics()
        snap = self.snapshot(topics)
        start = self.starting_offsets(snap)
        self._prev = KafkaSourceOffset(
            offsets=_nested(start),
            topic_ids={t: i.topic_id for t, i in topics.items()}).to_json()
        return self._prev

    def getDefaultReadLimit(self) -> ReadLimit:
        """Driver: maxOffsetsPerTrigger as ReadMaxRows, else minOffsetsPerTrigger as
        ReadMinRows (both are applied by :meth:`latestOffset` itself)."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    @reason_first_in_worker
    def prepareForTriggerAvailableNow(self) -> None:
        """Driver: fix the target (latest offsets now) that Trigger.AvailableNow reads up to."""
        snap = self.snapshot(self._current_topics())
        self._target = dict(snap.latest)

    @reason_first_in_worker
    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Driver: Spark asks for the next batch's end offset. Finds new topics/partitions,
        checks integrity against ``start``, applies admission control.

        Parameters
        ----------
        start
            The batch's start (the previous end). Spark 4.0 and 4.1 pass none: the start is
            then the last end this reader planned, and after a restart every partition's latest
            offset (the executors' reads still check a strict range's first offset).
        limit
            Spark's read limit (from :meth:`getDefaultReadLimit`); None when ``start`` is.

        Returns
        -------
        dict
            The end offset's JSON (``start`` itself when there is nothing to read yet).

        Raises
        ------
        DataLossError
            Integrity 'strict' and unread records are gone."""
        if start is None:
            self._prev = self._plan(self._prev, ReadAllAvailable()) if self._prev is not None \
                else self._all_latest()
            return self._prev
        assert limit is not None
        return self._plan(start, limit)

    def _all_latest(self) -> dict:
        snap = self.snapshot(self._current_topics())
        self._latest = dict(snap.latest)
        return KafkaSourceOffset(
            offsets=_nested(snap.latest),
            topic_ids={t: info.topic_id for t, info in snap.topics.items()},
            new_partitions=_nested({tp: snap.earliest.get(tp, 0) for tp in snap.latest})
        ).to_json()

    def _plan(self, start: dict, limit: ReadLimit) -> dict:
        prev = KafkaSourceOffset.from_json(start)
        snap = self.snapshot(self._current_topics())
        self._latest = dict(snap.latest)
        adv = advance(prev, snap, self._target)
        if self.options.integrity == "strict":
            enforce(adv.losses, "strict", "planning the next batch")
        until = adv.until
        if not isinstance(limit, ReadAllAvailable):
            # minOffsetsPerTrigger is not applied under AvailableNow: it could wait forever
            now = time.monotonic()
            min_rows = self.options.min_offsets_per_trigger
            if min_rows is not None and self._target is None and \
                    backlog(adv.start, until) < min_rows and \
                    now - self._last_trigger < self.options.max_trigger_delay_ms / 1000 and \
                    not adv.losses and not adv.new_partitions:
                return start
            max_rows = (limit.max_rows if isinstance(limit, ReadMaxRows)
                        else self.options.max_offsets_per_trigger)
            if max_rows is not None:
                until = rate_limit(adv.start, until, max_rows)
        end = KafkaSourceOffset(
            offsets=_nested(until),
            topic_ids={t: snap.topics[t].topic_id for t, _ in until},
            new_partitions=_nested(adv.new_partitions),
            loss_events=prev.loss_events + len(adv.losses),
            loss_records=prev.loss_records + sum(loss.records for loss in adv.losses))
        if end.offsets == prev.offsets and end.topic_ids == prev.topic_ids and not adv.losses:
            return start
        enforce(adv.losses, self.options.integrity, "planning the next batch")
        self._last_trigger = time.monotonic()
        return end.to_json()

    def reportLatestOffset(self) -> dict | None:
        """Driver: the newest offsets seen (shown as ``latestOffset`` in query progress, so the
        distance to ``endOffset`` is the lag)."""
        if self._latest is None:
            return None
        return KafkaSourceOffset(offsets=_nested(self._latest)).to_json()

    @reason_first_in_worker
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Driver: Spark asks for the batch's tasks: one input partition per topic-partition
        range (split only under integrity 'none'), the same again for a replayed batch.

        Parameters
        ----------
        start, end
            The batch's start and end offsets (JSON, from :meth:`latestOffset` or the log).

        Raises
        ------
        DataLossError
            A partition of ``end`` has no start (the offset log is inconsistent)."""
        self._prev = end
        ranges = plan_ranges(KafkaSourceOffset.from_json(start), KafkaSourceOffset.from_json(end),
                             self.options.integrity, self.options.min_partitions,
                             self.options.max_records_per_partition)
        return _input_partitions(ranges, self.options)

    def commit(self, end: dict) -> None:
        """Driver: Spark reports the batch ending at ``end`` done. With
        ``commitOffsetsToGroup`` its offsets go to that consumer group, so Kafka's lag tools see
        progress; a failure only warns.

        Parameters
        ----------
        end
            The batch's end offset (JSON)."""
        group = self.options.commit_group
        if group is None:
            return
        done = KafkaSourceOffset.from_json(end)
        try:
            self.metadata.commit_group_offsets(
                group, {(t, p): o for t, parts in done.offsets.items() for p, o in parts.items()})
        except Exception as exc:  # noqa: BLE001 - progress publishing must not fail the query
            log.warning("orderedkafka: committing offsets to group %r failed: %r", group, exc)

    def stop(self) -> None:
        """Driver: release the admin client."""
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    # -- executor ------------------------------------------------------------------------
    @reason_first_in_worker_iter
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: Spark reads one task's input partition (static and stateless).

        Parameters
        ----------
        partition
            An input partition :meth:`partitions` planned.

        Returns
        -------
        Iterator[pyarrow.RecordBatch]
            The range's records in offset order, or (``emit = ranges``) its describing row.

        Raises
        ------
        DataLossError, KafkaUnavailableError
            As :func:`~orderedstream.python_datasource.reader.read_range` raises them."""
        return _read(partition, self.options)


class OrderedKafkaBatchReader(DriverState, DataSourceReader):
    """Batch reader for ``spark.read``: [startingOffsets, endingOffsets) of every partition.
    ``partitions`` runs on the driver, ``read`` on executors (pickled copy: options only)."""

    def __init__(self, options: OrderedKafkaOptions) -> None:
        self.options = options
        self._metadata = None

    @reason_first_in_worker
    def partitions(self) -> Sequence[InputPartition]:
        """Driver: resolve start and end offsets and plan one range per partition."""
        topics = self.metadata.topics()
        snap = self.snapshot(topics)
        start = self.starting_offsets(snap)
        if self.options.ending is None:
            raise InvariantError("orderedkafka batch read parsed without an end "
                                 "(parse_options(streaming=False) always sets one)")
        end = resolve_spec(self.metadata, self.options.ending, sorted(start), snap.earliest,
                           snap.latest, "latest")
        for tp, off in sorted(end.items()):
            if off < start[tp]:
                raise OptionError(f"option '{self.options.ending.option}': end {off} of "
                                  f"{tp[0]}-{tp[1]} is before its start {start[tp]}")
            if off > snap.latest[tp]:
                raise OptionError(f"option '{self.options.ending.option}': end {off} of "
                                  f"{tp[0]}-{tp[1]} is beyond the log end {snap.latest[tp]}")
        ids = {t: i.topic_id for t, i in topics.items()}
        ranges = plan_ranges(KafkaSourceOffset(offsets=_nested(start), topic_ids=ids),
                             KafkaSourceOffset(offsets=_nested(end), topic_ids=ids),
                             self.options.integrity,
                             self.options.min_partitions, self.options.max_records_per_partition)
        return _input_partitions(ranges, self.options)

    @reason_first_in_worker_iter
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: Spark reads one task's input partition, as :meth:`partitions` planned.

        Parameters
        ----------
        partition
            An input partition :meth:`partitions` planned.

        Returns
        -------
        Iterator[pyarrow.RecordBatch]
            The range's records in offset order, or (``emit = ranges``) its describing row."""
        return _read(partition, self.options)


def _read(partition: InputPartition, options: OrderedKafkaOptions) -> Iterator[pa.RecordBatch]:
    """The range's records, or (``emit = ranges``) the one row describing the range (without
    secret values). Executor."""
    keep_pandas_lazy()  # the batches' Arrow arrays need no pandas (core.pandaslazy)
    if isinstance(partition, KafkaRangesPartition) and options.emit == "ranges":
        return iter([describe(rng, options) for rng in partition.ranges])
    if type(partition) is InputPartition and partition.value is None:
        return iter(())  # pyspark's stand-in when a batch read plans no range: no records
    if not isinstance(partition, KafkaInputPartition):
        raise InvariantError(f"orderedkafka was handed an input partition it did not plan: "
                             f"{type(partition).__name__}")
    if options.emit == "ranges":
        return iter([describe(partition.range, options)])
    from orderedstream.python_datasource.reader import read_range

    return read_range(partition.range, options)


def _supported_here(options: OrderedKafkaOptions) -> OrderedKafkaOptions:
    """``options``, or OptionError naming the Spark release an option needs."""
    for name, value in (("maxOffsetsPerTrigger", options.max_offsets_per_trigger),
                        ("minOffsetsPerTrigger", options.min_offsets_per_trigger)):
        if value is not None:
            require((4, 2), f"orderedkafka: option '{name}' (admission control of Spark's "
                    "Python streaming source)")
    return options


class OrderedKafkaDataSource(DataSource):
    """``format("orderedkafka")``: Spark's Kafka source schema and options, read in offset
    order per partition with integrity checks. Constructed on the driver (and pickled to
    Python workers). Options are validated at ``load()`` (:meth:`schema`) as far as both modes
    share their rules, and fully when Spark asks for the batch or stream reader."""

    @classmethod
    def name(cls) -> str:
        """The short name Spark registers the source under: ``orderedkafka``."""
        return "orderedkafka"

    @reason_first_in_worker
    def schema(self) -> StructType:
        """Driver, in the Python worker Spark starts at ``load()`` (not called when the user
        gives a schema): parse the options, so a bad one fails the ``load()`` with an
        OptionError naming it; Spark does not tell whether a batch or a streaming read
        follows, so batch- or stream-only rules wait for :meth:`reader` /
        :meth:`streamReader`."""
        options = _supported_here(parse_options(self.options, streaming=None))
        if options.emit == "ranges":
            return range_schema()
        return kafka_schema(options.include_headers)

    @reason_first_in_worker
    def reader(self, schema: StructType) -> DataSourceReader:
        """Driver: Spark asks for the batch reader of ``spark.read``.

        Parameters
        ----------
        schema
            The schema :meth:`schema` gave, or the user's.

        Raises
        ------
        OptionError
            An option is invalid, or not for a batch read; the message names it."""
        return OrderedKafkaBatchReader(parse_options(self.options, streaming=False))

    @reason_first_in_worker
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Driver: Spark asks for the micro-batch reader of ``spark.readStream``. Options a
        stream refuses (``endingOffsets``) fail from its first planning call instead.

        Parameters
        ----------
        schema
            The schema :meth:`schema` gave, or the user's."""
        try:
            options = _supported_here(parse_options(self.options, streaming=True))
        except OptionError as exc:
            return RefusedStreamReader(exc)
        return OrderedKafkaStreamReader(options)
