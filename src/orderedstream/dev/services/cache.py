"""The pack's cache folder on this machine, shared by every clone and virtual environment:
Kafka's and Spark's resolved jars, the driver JVM's class archive, the zip-less Spark home."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$ORDEREDSTREAM_CACHE``, else ``~/.cache/orderedstream``."""
    root = os.environ.get("ORDEREDSTREAM_CACHE") or Path.home() / ".cache" / "orderedstream"
    return Path(root)
