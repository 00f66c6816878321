"""Embedded defaults: start local Kafka, S3 and Spark for whatever endpoint was not given."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orderedstream.core.errors import ServiceError
from orderedstream.core.storage import s3_endpoint_options
from orderedstream.dev.services.kafka import KafkaBroker
from orderedstream.dev.services.process import port_open
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
                      workdir: Path | None = None, bucket: str = "lake",
                      keep_ports: bool = False) -> Iterator[Endpoints]:
    """Yield endpoints, starting a local broker / S3 server for each one not given; stops them.

    Each service keeps its data under ``workdir`` (``kafka/``, ``s3/``), so a second call on
    the same folder serves the same topics and objects.

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers to use; None: start a local broker.
    s3_endpoint
        An S3 endpoint to use (credentials from the standard AWS chain); None: start a local
        SeaweedFS.
    workdir
        The services' data folder; None: a new temporary folder.
    bucket
        The local S3 server's bucket.
    keep_ports
        Reuse the ports of the last start in ``workdir`` when they are free (saved in
        ``services.json``), so endpoints printed by an earlier run stay valid.

    Yields
    ------
    Endpoints
        Where the services are, with their storage options and what was started.

    Raises
    ------
    ServiceError
        Another process serves ``workdir``'s data (see :func:`serving`), or a local service
        did not start."""
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="orderedstream-"))
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if bootstrap is None or s3_endpoint is None:
            stack.enter_context(serving(root))
        with _started(root, bootstrap, s3_endpoint, bucket, keep_ports) as endpoints:
            yield endpoints


LOCK_FILE = "services.lock"


@contextlib.contextmanager
def serving(root: Path) -> Iterator[None]:
    """This process serves ``root``'s Kafka and S3 data: a second server on the same data
    (``orderedstream services`` still running when ``orderedstream demo`` starts) would break
    both, so it is refused naming the process that serves them. An ``fcntl`` lock: it ends
    with its process, however that ends.

    Parameters
    ----------
    root
        The services' data folder (the lock file goes there).

    Raises
    ------
    ServiceError
        Another process holds the lock; the message names it."""
    with open(root / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            raise ServiceError(
                f"the Kafka and S3 data in {root} are already served by {owner}: stop it "
                "first (Ctrl-C), or give another --workdir") from None
        handle.seek(0)
        handle.truncate()
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]]) if sys.argv else "python"
        handle.write(f"pid {os.getpid()} ({command})\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def _started(root: Path, bootstrap: str | None, s3_endpoint: str | None, bucket: str,
             keep_ports: bool) -> Iterator[Endpoints]:
    broker: KafkaBroker | None = None
    s3: S3Server | None = None
    started: list[str] = []
    try:
        saved = _saved_ports(root) if keep_ports else {}
        if bootstrap is None:
            broker = KafkaBroker(root / "kafka")
            if _free(saved.get("kafka")):
                broker.port, broker.controller_port = saved["kafka"]
            broker.start()
            bootstrap = broker.bootstrap
            started.append(f"Kafka {broker.version} (KRaft) on {bootstrap}, log {broker.log_path}")
        options: dict[str, Any] = {}
        if s3_endpoint is None:
            s3 = S3Server(root / "s3", bucket=bucket)
            if _free(saved.get("s3")):
                (s3.port, s3.master_port, s3.volume_port, s3.filer_port, s3.webdav_port,
                 s3.admin_port) = saved["s3"]
            s3.start()
            s3_endpoint = s3.endpoint
            options = s3.storage_options
            started.append(f"SeaweedFS S3 on {s3_endpoint} (bucket {bucket}), log {s3.log_path}")
        else:
            # An external endpoint: credentials from the standard AWS chain (environment).
            options = s3_endpoint_options(s3_endpoint)
        if keep_ports:
            _save_ports(root, broker, s3)
        yield Endpoints(bootstrap, s3_endpoint, options, root, started)
    finally:
        if broker is not None:
            broker.stop()
        if s3 is not None:
            s3.stop()


PORTS_FILE = "services.json"


def _saved_ports(root: Path) -> dict[str, list[int]]:
    try:
        data = json.loads((root / PORTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: [int(p) for p in v] for k, v in data.items() if isinstance(v, list)}


def _free(ports: list[int] | None) -> bool:
    return bool(ports) and not any(port_open(p) for p in ports or [])


def _save_ports(root: Path, broker: KafkaBroker | None, s3: S3Server | None) -> None:
    data = _saved_ports(root)
    if broker is not None:
        data["kafka"] = [broker.port, broker.controller_port]
    if s3 is not None:
        data["s3"] = [s3.port, s3.master_port, s3.volume_port, s3.filer_port, s3.webdav_port,
                      s3.admin_port]
    (root / PORTS_FILE).write_text(json.dumps(data, indent=1) + "\n")
