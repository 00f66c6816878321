"""Secrets against a real SASL/PLAIN broker and real Spark: the source authenticates with a
JAAS password, which never reaches ``emit = ranges`` rows, the checkpoint, the output or our
log lines; the stage reading the ranges refuses without it and reads with it.

The broker is the project's KRaft broker with a second, SASL_PLAINTEXT listener (the plain one
stays for creating topics and producing)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle

from orderedstream.core.errors import KafkaAuthenticationError
from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.dev.services.process import free_ports
from orderedstream.python_datasource.kafka_metadata import KafkaMetadata
from orderedstream.python_datasource.options import parse_options
from orderedstream.python_datasource.planning import OffsetRange
from orderedstream.python_datasource.reader import read_range
from orderedstream.statestore.ordered import OrderedStateful
from tests.fixtures import unique

# The user function below travels to executors by value (this module is not importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SECRET = "pw-Zq81-never-in-rows"
LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
JAAS = f'{LOGIN} username="alice" password="{SECRET}";'


class SaslBroker:
    """A KRaft broker with PLAINTEXT (admin, producing) and SASL_PLAINTEXT (user alice)."""

    def __init__(self, broker: KafkaBroker, sasl_port: int) -> None:
        self.broker = broker
        self.bootstrap = f"127.0.0.1:{sasl_port}"

    def options(self, name: str, password: str = SECRET, **extra: str) -> dict[str, str]:
        """Source options reading ``name`` through the SASL listener."""
        return {"kafka.bootstrap.servers": self.bootstrap, "subscribe": name,
                "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": f'{LOGIN} username="alice" password="{password}";',
                "startingOffsets": "earliest", **extra}


@pytest.fixture(scope="module")
def sasl(services_dir: Path) -> Iterator[SaslBroker]:
    broker = KafkaBroker(services_dir / unique("kafka-sasl"), heap="512m")
    (sasl_port,) = free_ports(1)
    broker.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                     f"CONTROLLER://127.0.0.1:{broker.controller_port},"
                     f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                                f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'{LOGIN} user_alice="{SECRET}";',
    })
    broker.start()
    try:
        yield SaslBroker(broker, sasl_port)
    finally:
        broker.kill()


def _topic(sasl: SaslBroker, partitions: int = 2, records: int = 20) -> str:
    name = unique("sasl")
    sasl.broker.create_topic(name, partitions)
    for p in range(partitions):
        sasl.broker.produce(name, [(f"k{i}", f"v{i}") for i in range(records)], partition=p)
    return name


def _files_containing(root: Path, *needles: str) -> list[str]:
    return sorted(str(path) for path in root.rglob("*") if path.is_file()
                  and any(n.encode() in path.read_bytes() for n in needles))


def offsets_seen(key: Any, record: Any, state: Any) -> list[tuple[bytes, int]]:
    return [(key, record["offset"])]


def _processor(tmp_path: Path, name: str, **kwargs: Any) -> OrderedStateful:
    root = tmp_path / name
    return OrderedStateful(offsets_seen, state_location=f"file://{root}/state",
                           output=f"file://{root}/out", output_schema="key binary, offset long",
                           store_options={"local_dir": str(root / "local")}, placement="off",
                           **kwargs)


def test_driver_and_reader_authenticate_and_log_no_secret(sasl: SaslBroker,
                                                          caplog: pytest.LogCaptureFixture,
                                                          reader: str) -> None:
    """In-process (as the planner and an executor run them): the right password reads, a wrong
    one is refused by the broker and fails as a KafkaAuthenticationError (not as a timeout);
    neither password appears in a log line or an error."""
    name = _topic(sasl, partitions=1, records=5)
    caplog.set_level(logging.DEBUG)
    options = parse_options(sasl.options(name, reader=reader), streaming=True)
    assert set(KafkaMetadata(options).topics()) == {name}
    got = pa.Table.from_batches(list(read_range(OffsetRange(name, 0, 0, 5), options)))
    assert got["offset"].to_pylist() == list(range(5))

    wrong = "wrong-Pw-1234"
    bad = parse_options(sasl.options(name, password=wrong, reader=reader), streaming=True)
    with pytest.raises(KafkaAuthenticationError,
                       match="refused the client's login.*kafka_options") as driver:
        KafkaMetadata(bad).topics()
    with pytest.raises(KafkaAuthenticationError, match="refused the client's login") as executor:
        list(read_range(OffsetRange(name, 0, 0, 5), bad))
    for text in (str(driver.value), str(executor.value), caplog.text, repr(options), repr(bad)):
        assert SECRET not in text and wrong not in text


def test_ranges_rows_lack_the_secret_and_the_stage_needs_it(spark: Any, sasl: SaslBroker,
                                                            tmp_path: Path) -> None:
    name = _topic(sasl)
    reader = spark.read.format("orderedkafka").options(**sasl.options(name, emit="ranges"))
    ranges = reader.load()
    rows = ranges.collect()
    assert sorted((r.partition, r.startOffset, r.endOffset) for r in rows) == \
        [(0, 0, 20), (1, 0, 20)]
    table_bytes = pa.BufferOutputStream()
    arrow = ranges.toArrow()
    with pa.ipc.new_stream(table_bytes, arrow.schema) as writer:
        writer.write_table(arrow)
    assert SECRET.encode() not in table_bytes.getvalue().to_pybytes()
    assert all(SECRET.encode() not in bytes(r.reader) for r in rows)

    with pytest.raises(Exception) as info:
        _processor(tmp_path, "without").process_batch(reader.load(), 0)
    message = str(info.value)
    # The stage re-raises the pack's error first (Spark's trace is its cause).
    assert type(info.value).__name__ == "OptionError", repr(info.value)
    assert "kafka.sasl.jaas.config" in message
    assert "kafka_options" in message and SECRET not in message

    proc = _processor(tmp_path, "with", kafka_options={"kafka.sasl.jaas.config": JAAS})
    result = proc.process_batch(reader.load(), 0)
    assert result.records == 40
    out = proc.table().to_arrow()
    assert sorted(out["offset"].to_pylist()) == sorted(list(range(20)) * 2)
    assert _files_containing(tmp_path, SECRET) == []


@pytest.mark.parametrize("emit", ["records", "ranges"])
def test_streaming_checkpoint_and_output_hold_no_secret(spark: Any, sasl: SaslBroker,
                                                        tmp_path: Path, emit: str) -> None:
    name = _topic(sasl)
    proc = _processor(tmp_path, "stage", kafka_options={"kafka.sasl.jaas.config": JAAS})
    frame = (spark.readStream.format("orderedkafka")
             .options(**sasl.options(name, emit=emit, maxOffsetsPerTrigger="15")).load())
    query = (frame.writeStream.foreachBatch(proc.process_batch)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    assert proc.table().to_arrow().num_rows == 40
    assert (tmp_path / "cp" / "offsets").is_dir()
    assert _files_containing(tmp_path, SECRET, "alice") == []
