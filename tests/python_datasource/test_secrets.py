"""Secret ``kafka.*`` settings (no service needed): the rule, kept apart from the others, never
in ``repr`` / messages / ``emit = ranges`` rows, and restored where the ranges are read."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

from orderedstream.core.errors import InvariantError, OptionError
from orderedstream.python_datasource.client_config import (
    KafkaSecrets,
    client_error,
    is_secret,
    secrets_from_options,
)
from orderedstream.python_datasource.kafka_metadata import KafkaMetadata
from orderedstream.python_datasource.options import OrderedKafkaOptions, parse_options
from orderedstream.python_datasource.planning import OffsetRange
from orderedstream.python_datasource.ranges import describe, described
from orderedstream.python_datasource.reader import read_range

SECRET = "s3cr3t-Value-91"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        f'username="alice" password="{SECRET}";')
SECURED = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
           "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
           "kafka.sasl.jaas.config": JAAS, "kafka.ssl.key.password": f"{SECRET}-key",
           "kafka.sasl.oauthbearer.client.secret": f"{SECRET}-oauth",
           "kafka.ssl.truststore.password": f"{SECRET}-jks"}


def secured(**extra: str) -> OrderedKafkaOptions:
    return parse_options({**SECURED, **extra}, streaming=True)


@pytest.mark.parametrize("name", [
    "sasl.password", "kafka.sasl.jaas.config", "sasl.oauthbearer.client.secret",
    "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "ssl.key.pem",
    "ssl_key", "sasl.username", "sasl.oauthbearer.config", "ssl.key.location",
    "sasl.oauthbearer.assertion.private.key.passphrase", "KAFKA.SSL.CA.PEM", "my.api.token",
    "some.credentials.file"])
def test_secret_names(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize("name", [
    "bootstrap.servers", "security.protocol", "sasl.mechanism", "ssl.ca.location",
    "group.id", "isolation.level", "ssl.certificate.location", "client.id"])
def test_public_names(name: str) -> None:
    assert not is_secret(name)


def test_secrets_are_kept_apart_and_never_printed() -> None:
    o = secured()
    assert o.kafka_params == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert o.secrets.options == ("kafka.sasl.jaas.config",
                                 "kafka.sasl.oauthbearer.client.secret", "kafka.ssl.key.password")
    assert set(o.secrets.names) == {"sasl.username", "sasl.password",
                                    "sasl.oauthbearer.client.secret", "ssl.key.password"}
    config = o.client_config()
    assert config["sasl.password"] == SECRET and config["ssl.key.password"] == f"{SECRET}-key"
    assert "ssl.truststore.password" not in config  # Java-only (JKS): dropped
    for text in (repr(o), str(o), repr(o.secrets), f"{o.secrets}", repr(o.without_secrets())):
        assert SECRET not in text and "alice" not in text, text
    assert "kafka.sasl.jaas.config" in repr(o)


def test_a_malformed_jaas_config_is_named_without_its_value() -> None:
    with pytest.raises(OptionError, match="kafka.sasl.jaas.config") as info:
        secured(**{"kafka.sasl.jaas.config": f"PlainLoginModule required pw={SECRET};"})
    assert SECRET not in str(info.value)


def test_ranges_rows_carry_secret_names_only() -> None:
    o = secured()
    batch = describe(OffsetRange("t", 0, 0, 10), o)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    row_bytes = sink.getvalue().to_pybytes()
    for value in (SECRET, "alice"):
        assert value.encode() not in row_bytes
    _, carried = pickle.loads(batch.column("reader")[0].as_py())
    assert carried.secrets.dropped and carried.secrets.options == o.secrets.options

    with pytest.raises(OptionError) as info:
        next(described(batch))
    message = str(info.value)
    assert SECRET not in message
    for needed in ("kafka.sasl.jaas.config", "kafka.ssl.key.password", "kafka_options"):
        assert needed in message, message

    given = secrets_from_options({k: v for k, v in SECURED.items() if k in (
        "kafka.sasl.jaas.config", "kafka.ssl.key.password",
        "kafka.sasl.oauthbearer.client.secret")})
    rng, restored = next(described(batch, given))
    assert rng == OffsetRange("t", 0, 0, 10)
    assert restored.client_config() == o.client_config()


def test_restoring_names_exactly_what_is_missing() -> None:
    batch = describe(OffsetRange("t", 0, 0, 10), secured())
    partial = secrets_from_options({"kafka.sasl.jaas.config": JAAS,
                                    "kafka.ssl.key.password": "x"})  # no oauth secret
    with pytest.raises(OptionError, match=r"missing: kafka\.sasl\.oauthbearer\.client\.secret, "
                                          r"librdkafka sasl\.oauthbearer\.client\.secret"):
        next(described(batch, partial))
    # the same settings spelled differently (username/password instead of a JAAS entry) do
    other = secrets_from_options({"kafka.sasl.username": "alice", "kafka.sasl.password": SECRET,
                                  "kafka.ssl.key.password": "k",
                                  "kafka.sasl.oauthbearer.client.secret": "o"})
    assert next(described(batch, other))[1].client_config()["sasl.password"] == SECRET


def test_options_without_secrets_never_connect() -> None:
    """A reader handed stripped options fails before any client is made (no broker here)."""
    stripped = secured().without_secrets()
    with pytest.raises(OptionError, match="kafka.sasl.jaas.config.*never written into"):
        list(read_range(OffsetRange("t", 0, 0, 10), stripped))
    with pytest.raises(OptionError, match="kafka.sasl.jaas.config"):
        KafkaMetadata(stripped).admin()


def test_client_errors_are_redacted_and_not_chained(reader: str) -> None:
    o = secured(**{"kafka.sasl.mechanism": "NOPE", "kafka.security.protocol": "SASL_PLAINTEXT",
                   "reader": reader})
    with pytest.raises(OptionError, match="refused by the Kafka client") as info:
        list(read_range(OffsetRange("t", 0, 0, 10), o))
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(OptionError, match="refused by the Kafka client"):
        KafkaMetadata(o).admin()
    quoted = client_error(ValueError(f'Invalid value "{SECRET}" for "sasl.password"'), o.secrets)
    assert SECRET not in str(quoted) and "<redacted>" in str(quoted)


@pytest.mark.parametrize("given,message", [
    ({"subscribe": "t"}, "'subscribe' is not a kafka.* option"),
    ({"kafka.sasl.password": 5}, "must be a string"),
    ({"kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
    ("kafka.sasl.password=x", "a mapping"),
])
def test_processor_side_options_are_checked(given: Any, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        secrets_from_options(given)


def test_processor_side_options_keep_only_secrets() -> None:
    assert secrets_from_options(None) == KafkaSecrets()
    got = secrets_from_options({"KAFKA.SASL.PASSWORD": SECRET, "kafka.security.protocol": "x"})
    assert got.options == ("kafka.sasl.password",) and got.settings() == {"sasl.password": SECRET}
    assert SECRET not in repr(got)


def test_secret_values_and_names_must_agree() -> None:
    with pytest.raises(InvariantError, match="values for"):
        KafkaSecrets(origins=(("sasl.password", "kafka.sasl.password"),), values={})


def test_secret_settings_cannot_hide_in_public_params() -> None:
    with pytest.raises(OptionError, match="sasl.password"):
        OrderedKafkaOptions(bootstrap_servers="h:1", strategy="subscribe", topics=("t",),
                            kafka_params={"sasl.password": SECRET})
