"""Checks made before the job's first batch processes a record (driver side).

Every location the job writes (output table, state, Spark checkpoint) gets a probe object
written, read back and deleted (``orderedstream.core.location``): a missing bucket, denied
access or an unreachable endpoint fails here with the URL named, not after a batch's records
were processed. Kafka is asked for its metadata once, with the same bounded wait, so an
unreachable broker fails before Spark starts. Options that Spark would only parse later
(trigger interval, idle timeout) are parsed here too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orderedstream.core.errors import KafkaUnavailableError, OptionError
from orderedstream.core.location import check_location
from orderedstream.core.storage import options_for
from orderedstream.core.units import parse_duration_ms


def check_kafka(bootstrap: str, pattern: str, timeout: float = 15.0) -> list[str]:
    """Check that Kafka answers a metadata request within ``timeout``.

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers, ``host:port[,...]``.
    pattern
        The topics' regular expression (``--topic-pattern``).
    timeout
        Seconds to wait for the answer (and for a connection).

    Returns
    -------
    list of str
        The topics matching ``pattern`` now, sorted; empty is allowed (topics may appear
        later).

    Raises
    ------
    OptionError
        ``pattern`` is not a regular expression.
    KafkaUnavailableError
        Kafka did not answer within ``timeout``."""
    from confluent_kafka.admin import AdminClient

    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise OptionError(f"--topic-pattern {pattern!r} is not a regular expression: {exc}. "
                          "Give a Java/Python regex, e.g. 'sessions-.*'") from exc
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                         "socket.connection.setup.timeout.ms": int(timeout * 1000)})
    try:
        topics = admin.list_topics(timeout=timeout).topics
    except Exception as exc:  # noqa: BLE001 - KafkaException; reported with the servers
        raise KafkaUnavailableError(
            f"Kafka at {bootstrap!r} did not answer a metadata request within {timeout:.0f}s "
            f"({exc}). Check --bootstrap-servers and that the brokers are up") from exc
    return sorted(t for t in topics if regex.fullmatch(t))


def check_durations(**values: str) -> None:
    """Check that each named value parses as a duration (e.g. '2 seconds', '10 minutes').

    Parameters
    ----------
    **values
        Option name (``idle_timeout`` for ``--idle-timeout``) -> its text.

    Raises
    ------
    OptionError
        A value is not a positive duration, the option named."""
    for name, value in values.items():
        parse_duration_ms(value, f"--{name.replace('_', '-')}")


def check_job(*, bootstrap: str, pattern: str, locations: Mapping[str, str],
              storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """Check Kafka (first: cheap), then every location, for one job.

    Parameters
    ----------
    bootstrap, pattern
        As ``check_kafka``.
    locations
        What each location is (``"--output"``) -> its URL or path.
    storage_options
        The pack's storage options; each location gets those that apply to it.

    Returns
    -------
    list of str
        The topics matching ``pattern`` now.

    Raises
    ------
    OptionError, KafkaUnavailableError
        As ``check_kafka``.
    LocationError
        A location does not take a probe object, the URL named."""
    topics = check_kafka(bootstrap, pattern)
    for what, url in locations.items():
        check_location(url, what, options_for(url, storage_options))
    return topics
