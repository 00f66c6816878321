"""The process tuning (``core.tuning``) is off unless ``ORDEREDSTREAM_PROCESS_TUNING=1``: no
malloc settings, no heap freeze or trim, no import hook, nothing kept open for other processes.
Each case runs in its own interpreter, with and without the variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orderedstream.core import tuning

pytestmark = pytest.mark.unit

PROBE = r"""
import ctypes, json, os, sys, tempfile, threading
from orderedstream.core import tuning, workerheap
from orderedstream.core.pandaslazy import keep_pandas_lazy
from orderedstream.statestore.options import StateStoreOptions
from orderedstream.statestore.rocksdb.options import make_options

out = {"on": tuning.process_tuning(), "lazy": keep_pandas_lazy(),
       "hook": any(type(f).__module__ == "orderedstream.core.pandaslazy" for f in sys.meta_path),
       "trim": workerheap.release_freed_memory()}
os.environ["SPARK_REUSE_WORKER"] = "1"
out["freeze"] = workerheap.freeze_worker_heap()
make_options(StateStoreOptions())  # sets glibc's malloc up with the tuning on


def allocate():
    keep = [ctypes.create_string_buffer(40_000) for _ in range(20)]
    started.wait()
    del keep


def arenas():
    sys.stderr.flush()
    ctypes.CDLL(None).malloc_stats()  # glibc: one "Arena N:" paragraph per arena, on stderr
    sys.stderr.write("ARENAS-END\n")
    sys.stderr.flush()


arenas()
started = threading.Event()
threads = [threading.Thread(target=allocate) for _ in range(4)]
for thread in threads:
    thread.start()
started.set()
for thread in threads:
    thread.join()
arenas()
print("RESULT " + json.dumps(out), flush=True)
"""


def _probe(tuned: bool) -> tuple[dict[str, object], int]:
    """The probe's figures, and how many arenas glibc's malloc added while four new threads
    allocated."""
    env = {k: v for k, v in os.environ.items()
           if k not in (tuning.ENV, "MALLOC_ARENA_MAX", "GLIBC_TUNABLES",
                        "MALLOC_MMAP_THRESHOLD_")}
    if tuned:
        env[tuning.ENV] = "1"
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    before, after = [sum(1 for line in part.splitlines() if line.startswith("Arena "))
                     for part in proc.stderr.split("ARENAS-END")[:2]]
    result: dict[str, object] = json.loads(lines[-1][len("RESULT "):])
    return result, after - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_without_the_variable_the_process_is_left_as_it_is() -> None:
    result, arenas = _probe(tuned=False)
    assert result == {"on": False, "lazy": False, "hook": False, "trim": False, "freeze": False}
    assert arenas > 0  # glibc's default: a new thread that allocates gets its own arena


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_with_the_variable_the_pack_tunes_the_process() -> None:
    result, arenas = _probe(tuned=True)
    # not a reused Spark worker (this interpreter's main module is not a daemon): no freeze
    assert result == {"on": True, "lazy": True, "hook": True, "trim": True, "freeze": False}
    assert arenas == 0  # M_ARENA_MAX 1: the new threads share the existing arena


def test_the_switch_reads_common_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, on in (("1", True), ("true", True), ("YES", True), ("0", False), ("", False),
                      ("no", False)):
        monkeypatch.setenv(tuning.ENV, value)
        assert tuning.process_tuning() is on, value
    monkeypatch.delenv(tuning.ENV)
    assert tuning.process_tuning() is False
