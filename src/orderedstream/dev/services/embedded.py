"""Embedded defaults: start local Kafka, S3 and Spark for whatever endpoint was not given."""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orderedstream.core.storage import s3_endpoint_options
from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.dev.services.s3 import S3Server

_log = logging.getLogger(__name__)


@dataclass
class Endpoints:
    """Where the job's services are: given by the user, or started locally."""

    bootstrap: str
    s3_endpoint: str | None
    storage_options: dict[str, Any]
    workdir: Path
    started: list[str] = field(default_factory=list)


@contextlib.contextmanager
def embedded_services(bootstrap: str | None = None, s3_endpoint: str | None = None,
                      workdir: Path | None = None, bucket: str = "lake") -> Iterator[Endpoints]:
    """Yield endpoints, starting a local broker / S3 server for each one not given; stops them."""
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="orderedstream-"))
    root.mkdir(parents=True, exist_ok=True)
    broker: KafkaBroker | None = None
    s3: S3Server | None = None
    started: list[str] = []
    try:
        if bootstrap is None:
            broker = KafkaBroker(root / "kafka").start()
            bootstrap = broker.bootstrap
            started.append(f"Kafka {broker.version} (KRaft) on {bootstrap}, log {broker.log_path}")
        options: dict[str, Any] = {}
        if s3_endpoint is None:
            s3 = S3Server(root / "s3", bucket=bucket).start()
            s3_endpoint = s3.endpoint
            options = s3.storage_options
            started.append(f"SeaweedFS S3 on {s3_endpoint} (bucket {bucket}), log {s3.log_path}")
        else:
            # An external endpoint: credentials from the standard AWS chain (environment).
            options = s3_endpoint_options(s3_endpoint)
        yield Endpoints(bootstrap, s3_endpoint, options, root, started)
    finally:
        if broker is not None:
            broker.stop()
        if s3 is not None:
            s3.stop()
