"""A machine not set up for the services (no S3 credentials, an S3 endpoint or Kafka brokers
that do not answer): the offline commands (``table``, ``replay``, ``state``) print the pack's
sentence with what to do, not a client library's traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from confluent_kafka import Consumer, KafkaException

from orderedstream.app.console import environment_error
from orderedstream.core.errors import KafkaUnavailableError
from tests.fixtures import unique


def _table_history(url: str, endpoint: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    clean.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=os.devnull,
                 AWS_SHARED_CREDENTIALS_FILE=os.devnull, **env)
    return subprocess.run([sys.executable, "-m", "orderedstream.app.cli", "table", "history",
                           url, "--s3-endpoint", endpoint], capture_output=True, text=True,
                          timeout=300, env=clean, check=False)


def test_missing_s3_credentials_say_what_to_set(s3) -> None:
    done = _table_history(s3.url(unique("nocreds")), s3.endpoint)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("orderedstream: LocationError: no usable S3 credentials"), \
        done.stderr[-3000:]
    assert "AWS_ACCESS_KEY_ID" in done.stderr.splitlines()[0]
    assert "Traceback" not in done.stderr


def test_an_s3_endpoint_that_does_not_answer_names_the_option(s3) -> None:
    done = _table_history(s3.url(unique("noendpoint")), "http://127.0.0.1:9", **s3.aws_env())
    assert done.returncode == 2, done.stderr[-3000:]
    first = done.stderr.splitlines()[0]
    assert first.startswith("orderedstream: LocationError: the S3 endpoint does not answer"), \
        done.stderr[-3000:]
    assert "127.0.0.1:9" in first and "--s3-endpoint" in first
    assert "Traceback" not in done.stderr


def test_brokers_that_do_not_answer_are_kafka_unavailable() -> None:
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": unique("down"),
                         "log_level": 0})
    try:
        try:
            consumer.list_topics(timeout=3)
        except KafkaException as exc:
            raised = exc
        else:
            raise AssertionError("a broker answered on 127.0.0.1:9")
    finally:
        consumer.close()
    wrapped = RuntimeError("replay failed")
    wrapped.__cause__ = raised
    found = environment_error(wrapped)
    assert isinstance(found, KafkaUnavailableError) and found.__cause__ is raised
    assert str(found).startswith("Kafka does not answer (") and "--bootstrap-servers" in str(found)
    assert environment_error(ValueError("bad input")) is None


def test_an_s3_endpoint_that_never_answers_fails_with_a_location_error(s3) -> None:
    """An endpoint that accepts connections and never answers (a stuck server, a wrong port
    behind a proxy) printed nothing for ten minutes; now a LocationError naming the timeout."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # accepted by the kernel, never read, never answered
    try:
        done = _table_history(s3.url(unique("stuck")),
                              f"http://127.0.0.1:{listener.getsockname()[1]}", **s3.aws_env())
    finally:
        listener.close()
    assert done.returncode == 2, done.stderr[-3000:]
    first = done.stderr.splitlines()[0]
    assert first.startswith("orderedstream: LocationError: table location"), done.stderr[-3000:]
    assert "did not answer within 20 s" in first and "Traceback" not in done.stderr


def test_a_missing_bucket_or_an_unknown_protocol_is_named(s3) -> None:
    url = f"s3://{unique('nobucket')}/table"
    done = _table_history(url, s3.endpoint, **s3.aws_env())
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith(f"orderedstream: LocationError: table location '{url}': "
                                  "bucket"), done.stderr[-3000:]
    assert "does not exist" in done.stderr.splitlines()[0]
    for bad, cause in (("foo://bar/baz", "Protocol not known: foo"),):
        result = subprocess.run([sys.executable, "-m", "orderedstream.app.cli", "sink",
                                 "batches", bad], capture_output=True, text=True, timeout=120,
                                check=False)
        assert result.returncode == 2, result.stderr[-3000:]
        assert result.stderr.startswith(f"orderedstream: LocationError: table location "
                                        f"'{bad}' cannot be opened"), result.stderr[-3000:]
        assert cause in result.stderr.splitlines()[0]
