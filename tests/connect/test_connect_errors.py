"""The user's mistakes through Spark Connect, as they meet them: the pack's sentence (what was
wrong, what is accepted) comes right after Spark's own prefix in the exception the client
sees, as in a classic session (``tests/statestore/ordered/test_user_query_errors.py``,
``tests/sinks/test_user_query_option_errors.py``): a missing key column in ``process_batch``,
rows of a wrong output schema through ``apply`` + ``commit_batch``, a misspelled sink option,
a Kafka setting without its ``kafka.`` prefix. Real Kafka, S3 (SeaweedFS) and a Connect
server in its own process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orderedstream.core.sparkmode import is_connect
from tests.connect.conftest import start_query
from tests.fixtures import unique
from tests.sinks.test_spark_sinks import make_input, stream
from tests.statestore.ordered.test_user_query_errors import (
    _assert_reason_first,
    _stage,
    _topic_with_records,
    wrong_rows,
)


def _source(spark: Any, kafka: Any, name: str) -> Any:
    return (spark.readStream.format("orderedkafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
            .option("startingOffsets", "earliest").load())


def _failure(writer: Any, checkpoint: Path) -> BaseException:
    """What the client sees of the query's failure: ``start()`` or ``awaitTermination()``."""
    with pytest.raises(Exception) as failed:
        query = start_query(writer.option("checkpointLocation", str(checkpoint))
                            .trigger(availableNow=True))
        try:
            query.awaitTermination(300)
        finally:
            query.stop()
    return failed.value


def test_a_missing_key_column_is_named_first_through_connect(connect, kafka, topic, s3,
                                                             tmp_path: Path) -> None:
    assert is_connect(connect)
    name = _topic_with_records(kafka, topic)
    stage = _stage(s3, tmp_path, key="user_id")
    failure = _failure(_source(connect, kafka, name).writeStream
                       .foreachBatch(stage.process_batch), tmp_path / "ck")
    _assert_reason_first(failure, "OptionError: the ordered stage needs input columns "
                         "['user_id'] (asked by key='user_id')", "key", "Feed it")
    assert stage.log.latest() is None


def test_rows_of_a_wrong_output_schema_are_named_first_through_connect(connect, kafka, topic,
                                                                       s3,
                                                                       tmp_path: Path) -> None:
    name = _topic_with_records(kafka, topic)
    stage = _stage(s3, tmp_path, func=wrong_rows, placement="off")
    failure = _failure(stage.apply(_source(connect, kafka, name)).writeStream
                       .foreachBatch(stage.commit_batch), tmp_path / "ck")
    _assert_reason_first(failure, "UserFunctionError: the ordered user function returned", "'n'")
    assert stage.log.latest() is None


def test_option_mistakes_are_named_first_through_connect(connect, kafka, topic, s3,
                                                         tmp_path: Path) -> None:
    """A misspelled ``fencedparquet`` option and a Kafka setting without ``kafka.``."""
    url = s3.url(unique("cx-opt"))
    writer = (stream(connect, make_input(tmp_path / "in", 1)).writeStream.format("fencedparquet")
              .option("path", url).option("storageOptions", json.dumps(s3.storage_options))
              .option("partitonBy", "k"))
    _assert_reason_first(_failure(writer, tmp_path / "ck-sink"),
                         "OptionError: unknown fencedparquet option 'partitonby' (did you mean "
                         "'partitionBy'?); accepted: ", "compression", "writerId")
    name = _topic_with_records(kafka, topic)
    frame = (connect.readStream.format("orderedkafka")
             .option("bootstrap.servers", kafka.bootstrap).option("subscribe", name))
    with pytest.raises(Exception) as failed:
        frame.load().writeStream.format("noop").start().awaitTermination(120)
    _assert_reason_first(failed.value, "OptionError: unknown option 'bootstrap.servers' for "
                         "format 'orderedkafka' (a Kafka client setting takes the prefix "
                         "'kafka.': did you mean 'kafka.bootstrap.servers'?)", "subscribe")
