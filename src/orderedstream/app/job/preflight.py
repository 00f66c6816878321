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
    """Kafka answers metadata requests within ``timeout``; returns the topics matching
    ``pattern`` now (an empty list is allowed: topics may appear later)."""
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
    """Each named value parses as a duration (e.g. '2 seconds', '10 minutes')."""
    for name, value in values.items():
        parse_duration_ms(value, f"--{name.replace('_', '-')}")


def check_job(*, bootstrap: str, pattern: str, locations: Mapping[str, str],
              storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """All of the above for one job: Kafka first (cheap), then every location."""
    topics = check_kafka(bootstrap, pattern)
    for what, url in locations.items():
        check_location(url, what, options_for(url, storage_options))
    return topics
