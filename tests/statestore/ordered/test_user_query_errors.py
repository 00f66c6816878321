"""Mistakes a new user makes with the ordered stage in their own streaming query, as they meet
them: ``spark.readStream.format("orderedkafka")...load().writeStream.foreachBatch(stage.
process_batch)...start()`` then ``awaitTermination()``, or ``stage.apply(df)`` with
``commit_batch``. The pack's sentence (what was wrong, what is accepted) comes right after
Spark's own prefix in the exception the query raises (about 315 characters), or the mistake
fails before the query starts (at ``OrderedStateful(...)`` or ``apply(df)``) when it can be
known there. Real Kafka, S3 (SeaweedFS) and Spark."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException

from orderedstream.core.errors import LocationError, OptionError
from orderedstream.statestore.ordered import OrderedStateful
from tests.fixtures import unique
from tests.sinks.test_user_query_option_errors import REASON_WITHIN, reason_index

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "key binary, n long"


def count(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    n = state.get_option(0) + 1
    state.update(n)
    return [(key, n)]


def wrong_rows(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    return [(key, "not a number")]


def _stage(s3: Any, tmp_path: Path, func: Any = count, **kwargs: Any) -> OrderedStateful:
    url = s3.url(unique("uq"))
    options: dict[str, Any] = {"state_location": f"{url}/state", "output": f"{url}/out",
                               "output_schema": SCHEMA, "storage_options": s3.storage_options,
                               "store_options": {"local_dir": str(tmp_path / "local")},
                               **kwargs}
    return OrderedStateful(func, **options)


def _source(spark: Any, kafka: Any, name: str, **options: str) -> Any:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    reader = (spark.readStream.format("orderedkafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
              .option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _query_failure(frame: Any, callback: Any, checkpoint: Path) -> StreamingQueryException:
    """What ``awaitTermination()`` raises for the user's query."""
    query = (frame.writeStream.foreachBatch(callback)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        with pytest.raises(StreamingQueryException) as failed:
            query.awaitTermination(300)
    finally:
        query.stop()
    return failed.value


def _topic_with_records(kafka: Any, topic: Any) -> str:
    name = topic(partitions=2)
    assert kafka.produce(name, [(f"k{i % 5}".encode(), b"v") for i in range(40)]) == 40
    return name


def _assert_reason_first(exc: BaseException, sentence: str, *named: str) -> int:
    at = reason_index(exc, sentence)
    text = str(exc)
    assert at <= REASON_WITHIN, text[:3000]
    for part in named:  # what was wrong and what is accepted, in the sentence
        assert part in text[at:at + 1000], text[at:at + 1500]
    print(f"reason at {at} of {len(text)}: {sentence[:60]}")
    return at


@pytest.mark.parametrize("where", ["state_location", "output"])
def test_a_missing_bucket_fails_at_construction_naming_the_url(spark, s3, tmp_path: Path,
                                                              where: str) -> None:
    bucket = f"no-such-bucket-{os.getpid()}"
    url = f"s3://{bucket}/q1"
    with pytest.raises(LocationError) as failed:
        _stage(s3, tmp_path, **{where: url})
    text = str(failed.value)
    assert f"location {url!r}: bucket {bucket!r} does not exist at " in text
    assert "Create it" in text


def test_an_unpicklable_function_fails_at_construction_naming_what_it_captures(
        spark, s3, tmp_path: Path) -> None:
    lock = threading.Lock()

    def guarded(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
        with lock:
            return count(key, record, state)

    with pytest.raises(OptionError) as failed:
        _stage(s3, tmp_path, func=guarded)
    text = str(failed.value)
    assert text.startswith("OrderedStateful(func=") and "cannot be pickled" in text, text
    assert "('lock', a _thread.lock)" in text and "create it inside the function" in text, text


@pytest.mark.parametrize("emit", ["records", "ranges"])
def test_a_missing_key_column_is_named_first_in_process_batch(spark, kafka, topic, s3,
                                                              tmp_path: Path, emit) -> None:
    name = _topic_with_records(kafka, topic)
    stage = _stage(s3, tmp_path, key="user_id")
    failure = _query_failure(_source(spark, kafka, name, emit=emit), stage.process_batch,
                             tmp_path / "ck")
    _assert_reason_first(failure, "OptionError: the ordered stage needs input columns "
                         "['user_id'] (asked by key='user_id')", "key", "Feed it")
    assert stage.log.latest() is None


@pytest.mark.parametrize("emit", ["records", "ranges"])
def test_a_missing_key_column_fails_at_apply_before_the_query_starts(spark, kafka, topic, s3,
                                                                     tmp_path: Path,
                                                                     emit) -> None:
    name = _topic_with_records(kafka, topic)
    stage = _stage(s3, tmp_path, key="user_id", placement="off")
    with pytest.raises(OptionError, match=r"needs input columns \['user_id'\] \(asked by "
                                          r"key='user_id'\), the batch has \['key', 'value'"):
        stage.apply(_source(spark, kafka, name, emit=emit))


def test_rows_of_a_wrong_output_schema_are_named_first(spark, kafka, topic, s3,
                                                       tmp_path: Path) -> None:
    name = _topic_with_records(kafka, topic)
    stage = _stage(s3, tmp_path, func=wrong_rows, placement="off")
    failure = _query_failure(stage.apply(_source(spark, kafka, name)), stage.commit_batch,
                             tmp_path / "ck")
    _assert_reason_first(failure, "UserFunctionError: the ordered user function returned",
                         "'n'")
    assert stage.log.latest() is None


def test_a_kafka_setting_without_its_prefix_is_told_the_prefixed_name(spark, kafka, topic,
                                                                      s3, tmp_path) -> None:
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    name = _topic_with_records(kafka, topic)
    stage = _stage(s3, tmp_path)
    with pytest.raises(Exception) as failed:
        frame = (spark.readStream.format("orderedkafka")
                 .option("bootstrap.servers", kafka.bootstrap).option("subscribe", name)
                 .load())
        _query_failure(frame, stage.process_batch, tmp_path / "ck")
    _assert_reason_first(failed.value, "OptionError: unknown option 'bootstrap.servers' for "
                         "format 'orderedkafka' (a Kafka client setting takes the prefix "
                         "'kafka.': did you mean 'kafka.bootstrap.servers'?)", "subscribe")
    with pytest.raises(Exception) as failed:
        _source(spark, kafka, name, startingOffset="earliest")
    _assert_reason_first(failed.value, "OptionError: unknown option 'startingoffset' for "
                         "format 'orderedkafka' (did you mean 'startingOffsets'?)",
                         "accepted are")
