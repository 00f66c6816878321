"""Which executor ran a task, found cheaply from inside the Python worker (executor side).

A standalone-cluster executor runs in ``<worker work dir>/<app id>/<executor id>`` and its
Python workers inherit that working directory; elsewhere (local mode, YARN, k8s) the
``SPARK_EXECUTOR_ID``-style variables are tried, then ``driver`` for local mode. The host name
is added so ids stay unique across machines. Returns None when nothing says which it is.
"""

from __future__ import annotations

import os
import socket


def executor_id() -> str | None:
    """``<host>/<executor id>`` of the executor running this Python worker, or None."""
    host = socket.gethostname()
    for name in ("SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_POD_NAME", "CONTAINER_ID"):
        value = os.environ.get(name)
        if value:
            return f"{host}/{value}"
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    parent, leaf = os.path.split(cwd)
    if leaf.isdigit() and os.path.basename(parent).startswith("app-"):
        return f"{host}/{leaf}"
    return None
