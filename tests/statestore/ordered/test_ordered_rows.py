"""What the ordered user function may return: iterables of rows, never a bare tuple of values.

A common mistake: ``return (key.decode(), "ok")`` (a tuple of strings, not a list of tuples) with
output schema ``key string, status string`` used to commit rows made of characters
(``{'key': 'k', 'status': '0'}, {'key': 'o', 'status': 'k'}``), two per record, and no error.
"""

from __future__ import annotations

import collections
import sys
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle

from orderedstream.core.errors import UserFunctionError
from orderedstream.statestore.ordered import OrderedStateful
from orderedstream.statestore.ordered.plan import BatchPlan, PartitionCommit
from orderedstream.statestore.ordered.runner import OrderedTask

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "key string, status string"  # as the user wrote it (DDL needs a SparkSession)
ARROW_SCHEMA = pa.schema([("key", pa.string()), ("status", pa.string())])  # the same, no Spark
Pair = collections.namedtuple("Pair", ["key", "status"])


def bare_tuple(key: Any, record: Any, state: Any) -> Any:
    return (key.decode(), "ok")  # the exact mistake: a bare tuple


def _input(topic: str, partition: int, offsets: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "key": [f"k{o}".encode() for o in offsets], "value": [b"v"] * len(offsets),
        "topic": [topic] * len(offsets), "partition": pa.array([partition] * len(offsets),
                                                               pa.int32()),
        "offset": pa.array(offsets, pa.int64())})


def _run(tmp_path: Any, func: Any) -> PartitionCommit:
    proc = OrderedStateful(func, state_location=f"file://{tmp_path}/state",
                           output=f"file://{tmp_path}/out", output_schema=ARROW_SCHEMA,
                           store_options={"local_dir": str(tmp_path / "local")})
    task = OrderedTask(proc.options, proc.func, BatchPlan(0, 1), proc.sink)
    (commit,) = [PartitionCommit.from_json(b.column(0)[0].as_py())
                 for b in task(iter([_input("orders", 2, [40, 41, 42])]))]
    return commit


@pytest.mark.parametrize("func,shown", [
    (bare_tuple, "bare tuple whose item 'k40' (str) is not a row"),
    (lambda k, r, s: "ok", "bare str 'ok'"),
    (lambda k, r, s: b"ok", "bare bytes b'ok'"),
    (lambda k, r, s: 7, "int 7, which is not an iterable of rows"),
    (lambda k, r, s: {"key": "a", "status": "ok"}, "bare dict"),
    (lambda k, r, s: [("a", "ok"), "b"], "a list whose item 'b' (str) is not a row"),
    (lambda k, r, s: (x for x in [None]), "item None (NoneType) is not a row"),
])
def test_results_that_are_not_rows_are_refused_naming_key_and_record(
        tmp_path: Any, func: Any, shown: str) -> None:
    with pytest.raises(UserFunctionError) as info:
        _run(tmp_path, func)
    text = str(info.value)
    assert text.startswith("the ordered user function returned ")
    assert shown in text
    assert "for key b'k40' at Kafka topic 'orders' partition 2 offset 40 (batch 0)" in text
    assert "e.g. return [(key, 'ok')]" in text


@pytest.mark.parametrize("func", [
    lambda k, r, s: [(k.decode(), "ok")],
    lambda k, r, s: ((k.decode(), "ok"),),
    lambda k, r, s: iter([[k.decode(), "ok"]]),
    lambda k, r, s: (Pair(k.decode(), "ok") for _ in range(1)),
    lambda k, r, s: [{"key": k.decode(), "status": "ok"}],
])
def test_iterables_of_tuples_lists_dicts_and_namedtuples_are_rows(tmp_path: Any,
                                                                  func: Any) -> None:
    commit = _run(tmp_path, func)
    assert (commit.records, commit.output_rows) == (3, 3)


@pytest.mark.parametrize("func", [
    lambda k, r, s: [{"key": k.decode(), "stauts": "ok"}],
    lambda k, r, s: (collections.OrderedDict(key=k.decode(), stauts="ok") for _ in range(1)),
])
def test_a_dict_row_with_an_unknown_field_is_refused_naming_the_field(tmp_path: Any,
                                                                      func: Any) -> None:
    with pytest.raises(UserFunctionError) as info:
        _run(tmp_path, func)
    assert str(info.value).startswith(
        "the ordered user function returned a dict row with field(s) 'stauts' that "
        "output_schema (key string, status string) does not have, in ")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


def test_none_and_empty_results_write_nothing(tmp_path: Any) -> None:
    assert _run(tmp_path, lambda k, r, s: None).output_rows == 0
    assert _run(tmp_path, lambda k, r, s: ()).output_rows == 0


def test_a_type_error_inside_a_generator_stays_the_users(tmp_path: Any) -> None:
    def broken(key: Any, record: Any, state: Any) -> Any:
        yield (key.decode(), "ok" + 1)

    with pytest.raises(TypeError, match="can only concatenate"):
        _run(tmp_path, broken)


@pytest.mark.parametrize("emit", ["records", "ranges"])
def test_a_bare_tuple_of_strings_fails_the_query_and_commits_nothing(
        spark, kafka, topic, s3, s3_url, tmp_path, emit, caplog) -> None:
    """The streaming query as a user writes it: the batch fails with the pack's error naming
    the key and the Kafka record; no row and no state is committed. The reason comes first:
    logged as one ERROR line when the batch fails (before Spark's report), and in Spark's
    message right after its own ~315-character [STREAM_FAILED] / foreachBatch prefix (it was
    after every frame of two traces, ~3,500 characters in)."""
    from orderedstream.python_datasource import OrderedKafkaDataSource

    spark.dataSource.register(OrderedKafkaDataSource)
    name = topic(partitions=1)
    assert kafka.produce(name, [(f"k{i}".encode(), b"v") for i in range(3)]) == 3
    proc = OrderedStateful(bare_tuple, state_location=f"{s3_url}/state",
                           output=f"{s3_url}/out", output_schema=SCHEMA,
                           storage_options=s3.storage_options,
                           store_options={"local_dir": str(tmp_path / "local")})
    frame = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
             .option("startingOffsets", "earliest").option("emit", emit).load())
    query = (frame.writeStream.foreachBatch(proc.process_batch)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    with caplog.at_level("ERROR", logger="orderedstream"), pytest.raises(Exception) as info:
        query.awaitTermination()
    text = str(info.value)
    assert "UserFunctionError" in text
    prefix = text.index("Return Message: ") + len("Return Message: ")  # Spark's and py4j's
    assert text.index("UserFunctionError: the ordered user function returned") - prefix < 60, \
        text[:800]
    logged = [r.getMessage() for r in caplog.records if getattr(r, "orderedstream_failure", 0)]
    assert logged and logged[0].startswith(
        "orderedstream: UserFunctionError: the ordered user function returned a bare tuple"), \
        logged
    assert "returned a bare tuple whose item 'k0' (str) is not a row" in text
    assert f"for key b'k0' at Kafka topic '{name}' partition 0 offset 0 (batch 0)" in text
    assert proc.log.get(0) is None
    assert proc.table().to_arrow().num_rows == 0
