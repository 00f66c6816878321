"""The one place Python reaches the JVM shim (``jvm-shim/``): its jar and its py4j entry points.

Without the jar everything still works; only placement of state partitions is left to Spark's
scheduler (state then restores from snapshots more often). That is logged once.
"""

from __future__ import annotations

import logging
from pathlib import Path

_log = logging.getLogger(__name__)
_warned = False


def bundled_jar() -> Path | None:
    """The shim jar shipped inside this distribution, or None when it was not built."""
    jars = sorted((Path(__file__).parent / "jars").glob("orderedstream-shim-*.jar"))
    return jars[-1] if jars else None


def warn_once_missing() -> None:
    """Log once that placement falls back to Spark's scheduler."""
    global _warned
    if not _warned:
        _warned = True
        _log.warning("orderedstream JVM shim not on the classpath: state partitions are placed "
                     "by Spark's scheduler and restore from snapshots when they move. Build it "
                     "with 'make shim' and add it to spark.jars.")
