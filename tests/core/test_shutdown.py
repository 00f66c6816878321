"""``orderedstream.core.shutdown``. ``stop_session`` against a real local Spark session: the
JVM's context is stopped when it returns, pyspark's accumulator server (which the JVM has
connected to, an accumulator having been updated) is shut down by the returned thread, and
the process can start a second session whose accumulators work. ``freeze_heap_at_exit``: at
exit, garbage in a reference cycle is still finalized, then the heap is frozen. Each in its
own interpreter: the tests' shared session has its JVM already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json, os, sys
from pyspark import SparkContext
from orderedstream.core.shutdown import THREAD_NAME, stop_session
from orderedstream.dev.local.settings import JOB_CONF
from orderedstream.dev.services.spark import local_spark_session

def session_with_updates(name):
    spark = local_spark_session(name, tmp_dir=sys.argv[1], conf=JOB_CONF)
    counter = spark.sparkContext.accumulator(0)
    spark.sparkContext.parallelize(range(10), 2).foreach(lambda x: counter.add(x))
    return spark, counter.value

spark, first = session_with_updates("shutdown-test-1")
server = spark.sparkContext._accumulatorServer
address = server.server_address
finishing = stop_session(spark)
stopped = SparkContext._active_spark_context is None
finishing.join(60)
spark, second = session_with_updates("shutdown-test-2")
print("RESULT " + json.dumps({
    "first": first, "second": second, "stopped_on_return": stopped,
    "thread": finishing.name, "daemon": finishing.daemon, "expected_name": THREAD_NAME,
    "finished": not finishing.is_alive(), "socket_closed": server.socket.fileno() == -1,
    "unix_socket_left": isinstance(address, str) and os.path.exists(address),
    "new_server": spark.sparkContext._accumulatorServer is not server}))
stop_session(spark)
"""


def test_stop_session_stops_spark_and_shuts_the_accumulator_server_in_the_background(
        tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "spark")],
                          capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["first"] == result["second"] == 45  # the JVM sent its updates both times
    assert result["stopped_on_return"] is True
    assert result["thread"] == result["expected_name"] and result["daemon"] is True
    assert result["finished"] is True and result["socket_closed"] is True
    assert result["unix_socket_left"] is False  # the job's sessions use a Unix socket
    assert result["new_server"] is True


FREEZE_SCRIPT = r"""
import atexit, gc, sys
from orderedstream.core.shutdown import freeze_heap_at_exit

atexit.register(lambda: print("FROZEN", gc.get_freeze_count(), flush=True))  # runs after it
freeze_heap_at_exit()
gc.disable()  # only the exit handler's collection may find the cycle below

class Node:
    def __init__(self, path):
        self.path, self.me = path, self
    def __del__(self):
        with open(self.path, "w") as handle:
            handle.write("finalized")

Node(sys.argv[1])  # garbage at once: a cycle with a finalizer
"""


def test_freeze_heap_at_exit_finalizes_cyclic_garbage_then_freezes_the_heap(
        tmp_path: Path) -> None:
    marker = tmp_path / "finalized.txt"
    proc = subprocess.run([sys.executable, "-c", FREEZE_SCRIPT, str(marker)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.read_text() == "finalized"
    frozen = [line for line in proc.stdout.splitlines() if line.startswith("FROZEN ")]
    assert frozen and int(frozen[0].split()[1]) > 1000, proc.stdout
