"""The pack's modules have current compiled bytecode after ``scripts/bootstrap.sh``: pip compiles
what it installs but not an editable install's files, and with ``PYTHONDONTWRITEBYTECODE`` set
no process writes them, so every Spark worker, planner and source runner compiled the modules
it imported again, in every process."""

from __future__ import annotations

import importlib.util
import os
import struct

from orderedstream.app.job.warmup import STAGE_MODULES


def _bytecode_state(module: str) -> str:
    """``current``, ``missing`` or ``stale`` for the .pyc Python would read for ``module``."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    cached = importlib.util.cache_from_source(spec.origin)
    if not os.path.exists(cached):
        return "missing"
    with open(cached, "rb") as handle:
        header = handle.read(16)
    flags, mtime, size = struct.unpack("<III", header[4:16])
    source = os.stat(spec.origin)
    fresh = (header[:4] == importlib.util.MAGIC_NUMBER and flags == 0
             and mtime == int(source.st_mtime) & 0xFFFFFFFF and size == source.st_size & 0xFFFFFFFF)
    return "current" if fresh else "stale"


def test_the_modules_a_worker_imports_are_compiled() -> None:
    ours = [m for m in STAGE_MODULES if m.startswith("orderedstream.")]
    assert ours
    states = {m: _bytecode_state(m) for m in ours}
    assert set(states.values()) == {"current"}, (
        f"{states}: scripts/bootstrap.sh compiles them (it runs before scripts/test)")


def test_the_registrations_spark_s_lookup_imports_are_compiled() -> None:
    modules = ["pyspark_orderedkafka", "pyspark_fenceddelta", "pyspark_fencedparquet",
               "pyspark_rocksstate", "orderedstream.core.entrypoint"]
    states = {m: _bytecode_state(m) for m in modules}
    assert set(states.values()) == {"current"}, (
        f"{states}: scripts/bootstrap.sh compiles them (it runs before scripts/test)")
