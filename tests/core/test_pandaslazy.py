"""pyarrow's pandas shim follows whether pandas is imported (core.pandaslazy), and the embedded
session's driver does not import pandas through PySpark's NumPy converters or ``mapInArrow``
(dev.embedded_session); all of it only with the process tuning on. Each case runs in its own
interpreter: the test process has pandas imported already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LAZY = r"""
import json, sys, threading
import pyarrow as pa
from orderedstream.core.pandaslazy import keep_pandas_lazy, pyarrow_has_pandas

out = {"kept": keep_pandas_lazy()}
pa.array([1, None]); pa.scalar("x", pa.string()); pa.RecordBatch.from_pylist([{"a": 1}])
pa.array([b"k"] * 3, pa.binary()); pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))
out["after_arrays"] = ["pandas" in sys.modules, pyarrow_has_pandas()]
if sys.argv[1] == "thread":  # pandas imported by another thread than the one that primed
    worker = threading.Thread(target=lambda: __import__("pandas"))
    worker.start(); worker.join()
import pandas as pd
out["after_import"] = pyarrow_has_pandas()
out["nulls"] = pa.array(pd.Series([1.0, float("nan")])).null_count
out["table"] = pa.table(pd.DataFrame({"a": [1, 2]})).num_rows
out["to_pandas"] = pa.RecordBatch.from_pylist([{"a": 3}]).to_pandas()["a"].tolist()
out["stamp"] = str(pa.array([pd.Timestamp("2026-01-02 00:00:00.000000001")]).type)
out["again"] = keep_pandas_lazy()
print("RESULT " + json.dumps(out))
"""

SESSION = r"""
import json, sys
import numpy as np
from pathlib import Path
from orderedstream.dev.embedded_session import embedded_session

def double(batches):
    import pyarrow.compute as pc
    for batch in batches:
        yield batch.set_column(0, "id", pc.multiply(batch.column(0), 2))

loaded = []
spark = embedded_session("driver-imports-test", master="local[1]", tmp_dir=Path(sys.argv[1]))
loaded.append("pandas" in sys.modules)
jvm = spark.sparkContext._jvm
out = {"array": jvm.java.util.Arrays.toString(np.array([1.5, 2.5])),
       "scalar": jvm.java.lang.String.valueOf(np.int64(5)),
       "count": spark.range(5).where("id in (1, 2)").count()}
loaded.append("pandas" in sys.modules)
out["mapped"] = [r.id for r in spark.range(3).mapInArrow(double, "id long").collect()]
loaded.append("pandas" in sys.modules)
import pandas  # from now on PySpark's own path, its check included
out["plain"] = [r.id for r in spark.range(3).mapInArrow(double, "id long").collect()]
out["loaded"] = loaded
spark.stop()
print("RESULT " + json.dumps(out))
"""


def _run(script: str, arg: str, **env: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", script, arg], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(lines[-1][len("RESULT "):])
    return result


@pytest.mark.unit
def test_arrays_from_python_objects_leave_pandas_unloaded() -> None:
    result = _run(LAZY, "main")
    assert result["kept"] is True
    assert result["after_arrays"] == [False, False]


@pytest.mark.unit
def test_pyarrow_has_full_pandas_behaviour_once_pandas_is_imported() -> None:
    plain = _run(LAZY, "main", ORDEREDSTREAM_LAZY_PANDAS="0")  # pyarrow as it comes
    assert (plain["nulls"], plain["table"], plain["to_pandas"]) == (1, 2, [3])
    for how in ("main", "thread"):
        result = _run(LAZY, how)
        assert result["after_import"] is True, how
        # NaN of a Series is a null, a DataFrame a table, pd.Timestamp's unit kept: as plain
        same = ("after_import", "nulls", "table", "to_pandas", "stamp")
        assert {k: result[k] for k in same} == {k: plain[k] for k in same}, how
        assert result["again"] is False, how


@pytest.mark.unit
def test_off_switch_leaves_pyarrow_as_it_comes() -> None:
    result = _run(LAZY, "main", ORDEREDSTREAM_LAZY_PANDAS="0")
    assert result["kept"] is False
    assert result["after_arrays"] == [True, True]


def test_the_embedded_sessions_driver_and_map_in_arrow_do_not_import_pandas(
        tmp_path: Path) -> None:
    result = _run(SESSION, str(tmp_path / "spark"))
    same = {"array": "[1.5, 2.5]", "scalar": "5", "count": 2, "mapped": [0, 2, 4],
            "plain": [0, 2, 4]}
    # pandas stays out after the session, NumPy arguments and mapInArrow
    assert result == {**same, "loaded": [False, False, False]}
    # PySpark as it comes: pandas from the session's first py4j call (pyspark.testing.utils)
    for off in ({"ORDEREDSTREAM_LAZY_PANDAS": "0"}, {"ORDEREDSTREAM_PROCESS_TUNING": "0"}):
        plain = _run(SESSION, str(tmp_path / f"spark-off-{len(off)}-{sorted(off)[0]}"), **off)
        assert plain == {**same, "loaded": [True, True, True]}, off
