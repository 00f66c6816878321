"""Where a replayed batch's records come from: its offset range, planned by Spark and kept in
the query checkpoint, read again from Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from orderedstream.core.errors import DataLossError, OptionError, StateNotFoundError
from orderedstream.core.storage import options_for, url_to_fs
from orderedstream.python_datasource.offsets import KafkaSourceOffset
from orderedstream.python_datasource.options import parse_options
from orderedstream.python_datasource.planning import OffsetRange
from orderedstream.python_datasource.reader import read_range


@dataclass(frozen=True)
class BatchRange:
    """Records ``[start, end)`` of Kafka ``topic``-``partition`` that batch ``batch_id`` read."""

    batch_id: int
    topic: str
    partition: int
    start: int
    end: int

    def describe(self) -> str:
        """The range for messages: ``Kafka <topic>-<partition> offsets [start, end)``."""
        return f"Kafka {self.topic}-{self.partition} offsets [{self.start}, {self.end})"


def _source_offsets(checkpoint: str, batch_id: int,
                    storage_options: Mapping[str, Any]) -> list[KafkaSourceOffset] | None:
    """The orderedkafka offsets of ``<checkpoint>/offsets/<batch_id>`` (None: no such file)."""
    url = checkpoint.rstrip("/") + f"/offsets/{batch_id}"
    fs, path = url_to_fs(url, options_for(checkpoint, storage_options))
    if not fs.exists(path):
        return None
    with fs.open(path, "rt") as handle:
        lines = handle.read().splitlines()
    found = []
    for line in lines[2:]:
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(raw, dict) and "offsets" in raw:
            found.append(KafkaSourceOffset.from_json(raw))
    return found


def _next_offset(offsets: list[KafkaSourceOffset], topic: str, partition: int) -> int | None:
    for offset in offsets:
        value = offset.get(topic, partition)
        if value is not None:
            return value
    return None


def batch_range(checkpoint: str, batch_id: int, topic: str, partition: int, *,
                committed_first: int | None, storage_options: Mapping[str, Any] | None = None,
                ) -> BatchRange:
    """The offsets one batch planned for one Kafka partition, from the query checkpoint.

    Spark writes ``<checkpoint>/offsets/<N>`` before batch N runs; its ``orderedkafka`` line
    maps topic -> partition -> the next offset after batch N. Batch N read ``[end of N-1, end
    of N)``; a partition new in N starts at its ``newPartitions`` offset, else (batch 0) at
    the first offset the commit record names.

    Parameters
    ----------
    checkpoint
        The query's ``checkpointLocation``.
    batch_id
        The batch.
    topic, partition
        The Kafka partition.
    committed_first
        The first offset the batch's commit record names for it, or ``None``.
    storage_options
        fsspec options for a remote checkpoint.

    Returns
    -------
    BatchRange
        The records ``[start, end)`` the batch read (empty when it read none).

    Raises
    ------
    StateNotFoundError
        The checkpoint no longer (or never) holds the batch's offsets file.
    OptionError
        The batch did not read this topic-partition (the ones it read are listed).

    Runs on
    -------
    driver"""
    storage = dict(storage_options or {})
    end_offsets = _source_offsets(checkpoint, batch_id, storage)
    if end_offsets is None:
        raise StateNotFoundError(
            f"the query checkpoint {checkpoint} has no offsets/{batch_id}: Spark keeps the "
            "offsets of the last spark.sql.streaming.minBatchesToRetain batches (default 100); "
            "pass the checkpoint of the query that committed the batch")
    end = _next_offset(end_offsets, topic, partition)
    if end is None:
        raise OptionError(f"batch {batch_id} did not read Kafka {topic}-{partition} (the "
                          f"checkpoint's offsets/{batch_id} has no such topic-partition); "
                          "accepted --partition values are the topic-partitions it lists: "
                          + ", ".join(sorted(f"{t}:{p}" for o in end_offsets
                                             for t, p in o.partitions())))
    start: int | None = None
    previous = _source_offsets(checkpoint, batch_id - 1, storage) if batch_id > 0 else None
    if previous:
        start = _next_offset(previous, topic, partition)
    if start is None:
        for offset in end_offsets:
            start = offset.new_partitions.get(topic, {}).get(partition)
            if start is not None:
                break
    if start is None:
        start = committed_first if committed_first is not None else end
    return BatchRange(batch_id, topic, partition, int(start), int(end))


def check_retained(rng: BatchRange, bootstrap_servers: str,
                   kafka_options: Mapping[str, str] | None = None) -> None:
    """Refuse a range that Kafka's retention (or ``delete_records``) removed part of.

    Parameters
    ----------
    rng
        The batch's range.
    bootstrap_servers
        The Kafka brokers.
    kafka_options
        Extra client options (a ``kafka.`` prefix is dropped).

    Raises
    ------
    DataLossError
        The partition now starts after ``rng.start``, naming topic, partition and offsets.

    Runs on
    -------
    driver"""
    if rng.end <= rng.start:
        return
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": "orderedstream-replay", "enable.auto.commit": False,
                         **{k.removeprefix("kafka."): v for k, v in (kafka_options or {}).items()}})
    try:
        low, _high = consumer.get_watermark_offsets(
            TopicPartition(rng.topic, rng.partition), timeout=30, cached=False)
    finally:
        consumer.close()
    if low > rng.start:
        gone_to = min(int(low), rng.end)
        raise DataLossError(
            f"batch {rng.batch_id} read Kafka topic {rng.topic!r} partition {rng.partition} "
            f"offsets [{rng.start}, {rng.end}), but offsets [{rng.start}, {gone_to}) are no "
            f"longer in Kafka (the partition now starts at offset {low}: retention or "
            "delete_records removed them). This batch cannot be replayed; a batch whose range "
            "starts at or after the log start can")


def read_batch(rng: BatchRange, bootstrap_servers: str, *, columns: list[str] | None,
               kafka_options: Mapping[str, str] | None = None) -> Iterator[pa.RecordBatch]:
    """The range's records as bounded Arrow batches (the stage's own reader), in offset order.

    Parameters
    ----------
    rng
        The batch's range.
    bootstrap_servers
        The Kafka brokers.
    columns
        The columns to keep; ``None``: all of ``orderedkafka``'s.
    kafka_options
        Extra client options, with or without the ``kafka.`` prefix.

    Returns
    -------
    Iterator[pa.RecordBatch]
        Non-empty batches of the records.

    Runs on
    -------
    driver"""
    options = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": rng.topic}
    for key, value in (kafka_options or {}).items():
        options[key if key.startswith("kafka.") else f"kafka.{key}"] = value
    parsed = parse_options(options, streaming=None)
    for batch in read_range(OffsetRange(rng.topic, rng.partition, rng.start, rng.end), parsed):
        if batch.num_rows:
            yield batch.select(columns) if columns is not None else batch


__all__ = ["BatchRange", "batch_range", "check_retained", "read_batch"]
