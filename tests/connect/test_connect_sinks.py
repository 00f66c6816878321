"""The stateless sinks and the state reader through Spark Connect: ``format("fencedparquet")``
and ``format("fenceddelta")`` streaming sinks, ``DeltaBatchWriter`` (the query id from the
checkpoint: a restart skips, another checkpoint is refused), ``format("rocksstate")``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

from orderedstream.core.commitlog import CommitLog
from orderedstream.sinks.deltalog import DeltaBatchLog
from orderedstream.sinks.table import FencedTable
from orderedstream.statestore.ordered import OrderedStateful
from tests.connect.conftest import start_query
from tests.fixtures import unique
from tests.sinks.test_spark_sinks import ROWS, make_input, stream
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _wait(writer: Any) -> BaseException | None:
    query = start_query(writer)
    try:
        query.awaitTermination(600)
    except Exception:  # noqa: BLE001 - the failure is read from the query below
        pass
    finally:
        query.stop()
    return query.exception()


def test_fencedparquet_sink_through_connect_exactly_once_and_a_second_query_refused(
        connect, s3, tmp_path: Path) -> None:
    url, opts = s3.url(unique("cx-fenced")), s3.storage_options
    source = make_input(tmp_path / "in", 2)

    def start(checkpoint: str, src: Path) -> Any:
        return (stream(connect, src).writeStream.format("fencedparquet")
                .option("path", url).option("storageOptions", json.dumps(opts))
                .option("partitionBy", "k").option("checkpointLocation", checkpoint)
                .trigger(availableNow=True))

    assert _wait(start(str(tmp_path / "ck-a"), source)) is None
    assert sorted(FencedTable(url, opts).to_arrow()["id"].to_pylist()) == list(range(2 * ROWS))
    error = _wait(start(str(tmp_path / "ck-b"), make_input(tmp_path / "in-b", 1, 50)))
    assert error is not None and "already committed by writer 'checkpoint:" in str(error)
    make_input(source, 1, start_file=2)  # the first query resumes: its next batch once
    assert _wait(start(str(tmp_path / "ck-a"), source)) is None
    assert sorted(FencedTable(url, opts).to_arrow()["id"].to_pylist()) == list(range(3 * ROWS))
    assert [r.batch_id for r in CommitLog(url, opts).records()] == [0, 1, 2]


def test_fenceddelta_sink_through_connect_exactly_once_across_a_restart(
        connect, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    url = str(tmp_path / "delta")
    source = make_input(tmp_path / "in", 2)

    def start() -> Any:
        return (stream(connect, source).writeStream.format("fenceddelta")
                .option("path", url).option("writerId", "events")
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True))

    assert _wait(start()) is None
    make_input(source, 1, start_file=2)
    assert _wait(start()) is None
    ids = DeltaTable(url).to_pyarrow_table()["id"].to_pylist()
    assert sorted(ids) == list(range(3 * ROWS))  # every row once
    assert DeltaTable(url).version() == 2  # one commit per batch: versions 0, 1, 2


def test_delta_batch_writer_through_connect_reads_the_query_id_from_the_checkpoint(
        connect, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from orderedstream.sinks.deltaforeach import DeltaBatchWriter

    url = str(tmp_path / "events")
    source = make_input(tmp_path / "in", 2)

    def run(checkpoint: str) -> BaseException | None:
        location = str(tmp_path / checkpoint)
        sink = DeltaBatchWriter(url, writer_id="events", checkpoint_location=location)
        return _wait(stream(connect, source).writeStream.foreachBatch(sink)
                     .option("checkpointLocation", location)
                     .trigger(availableNow=True))

    assert run("ckpt-1") is None
    assert run("ckpt-1") is None  # a restart from the same checkpoint: nothing new, no error
    metadata = json.loads((tmp_path / "ckpt-1" / "metadata").read_text().splitlines()[0])
    records = list(DeltaBatchLog(url, writer_id="events").records())
    assert [r.batch_id for r in records] == [0, 1]
    # the checkpoint's query id, in every commit
    assert {(r.extra or {}).get("query_id") for r in records} == {metadata["id"]}
    error = run("ckpt-2")
    assert error is not None and "already committed by writer 'events' from streaming query" \
        in str(error), error
    assert DeltaTable(url).to_pyarrow_table().num_rows == 2 * ROWS  # nothing lost or doubled


def test_rocksstate_reads_the_ordered_state_through_connect(connect, kafka, topic, s3,
                                                           tmp_path: Path) -> None:
    name = topic(partitions=2)
    records = [(f"k{i % 6}".encode(), str(i // 6).encode()) for i in range(60)]
    assert kafka.produce(name, records) == len(records)
    url, opts = s3.url(unique("cx-state")), s3.storage_options
    stage = OrderedStateful(check_order, state_location=f"{url}/state", output=f"{url}/out",
                            output_schema=ORDER_SCHEMA, storage_options=opts,
                            store_options={"local_dir": str(tmp_path / "local")})
    frame = (connect.read.format("orderedkafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", name)
             .option("startingOffsets", "earliest").load())
    stage.process_batch(frame, 0)
    state = (connect.read.format("rocksstate").option("path", f"{url}/state")
             .option("table", f"{url}/out").option("storage_options", json.dumps(opts))
             .option("local_dir", str(tmp_path / "reader")).load())
    rows = state.select("topic", "partition", "batch_id", "key", "value").collect()
    assert {(r["key"], json.loads(r["value"])) for r in rows} == {
        (f"k{i}".encode(), 9) for i in range(6)}  # each key's last value
    assert {r["batch_id"] for r in rows} == {0} and {r["topic"] for r in rows} == {name}
    expected = {p: {k for k, _ in stage.read_state(name, p)} for p in (0, 1)}
    assert {p: {r["key"] for r in rows if r["partition"] == p} for p in (0, 1)} == expected
