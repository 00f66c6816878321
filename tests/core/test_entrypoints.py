"""The ``pyspark_*`` registration modules: Spark's lookup of Python Data Sources imports them
in a fresh planner process and asks only ``name()``; the pack's sources, pyarrow and fsspec
are imported when Spark makes an instance, and that instance is the real source."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import pyspark_fenceddelta
import pyspark_fencedparquet
import pyspark_orderedkafka
import pyspark_rocksstate
from orderedstream.core.entrypoint import LazyDataSource
from orderedstream.python_datasource.ranges import range_schema
from orderedstream.python_datasource.source import OrderedKafkaDataSource

RANGES = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "emit": "ranges"}
REGISTRATIONS = (pyspark_orderedkafka, pyspark_fenceddelta, pyspark_fencedparquet,
                 pyspark_rocksstate)


def _new_modules(code: str) -> set[str]:
    """Modules a fresh interpreter has after ``code``, less those of pyspark's datasource API
    (which Spark's lookup worker has imported before it imports the registrations)."""
    probe = ("import sys, json; import pyspark.sql.datasource; before = set(sys.modules); "
             f"{code}; print(json.dumps(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


HEAVY = {"pyarrow", "fsspec", "s3fs", "confluent_kafka", "rocksdict", "deltalake", "numpy",
         "pandas"}


def test_spark_s_lookup_imports_nothing_heavy() -> None:
    names = ", ".join(m.__name__ for m in REGISTRATIONS)
    added = _new_modules(f"import {names}; [m.DefaultSource.name() for m in ({names},)]")
    heavy = sorted(m for m in added if m.split(".")[0] in HEAVY
                   or m.startswith(("orderedstream.python_datasource", "orderedstream.sinks",
                                    "orderedstream.statestore")))
    assert not heavy, heavy
    assert "orderedstream.core.entrypoint" in added


def test_load_s_schema_step_imports_no_pyarrow() -> None:
    """Spark's ``create_data_source`` process: the instance and its schema (both modes)."""
    added = _new_modules(
        "import pyspark_orderedkafka as m; "
        f"[m.DefaultSource(options={{**{RANGES!r}, 'emit': e}}).schema() "
        "for e in ('records', 'ranges')]")
    assert "orderedstream.python_datasource.source" in added
    assert not sorted(m for m in added if m.split(".")[0] in HEAVY)


@pytest.mark.parametrize("module", REGISTRATIONS, ids=lambda m: m.__name__)
def test_a_registration_names_its_source_and_makes_its_instances(module: Any) -> None:
    registered = module.DefaultSource
    target = registered.target_class()
    assert registered.name() == target.name()
    assert issubclass(registered, LazyDataSource)


def test_an_instance_is_the_real_source() -> None:
    made = pyspark_orderedkafka.DefaultSource(options=RANGES)
    assert type(made) is OrderedKafkaDataSource
    assert made.options == RANGES
    assert made.schema().names == range_schema().names


def test_a_target_that_is_not_a_data_source_is_refused() -> None:
    class Broken(LazyDataSource):
        target = "json:dumps"

        @classmethod
        def name(cls) -> str:
            return "broken"

    with pytest.raises(TypeError, match="json:dumps.*not a pyspark.sql.datasource.DataSource"):
        Broken(options={})


def test_spark_resolves_the_formats_through_the_registrations(spark: Any) -> None:
    """Without ``spark.dataSource.register``: Spark's own lookup, then ``load()``'s instance
    (the real source: its schema, its option errors with the reason first)."""
    frame = (spark.readStream.format("orderedkafka")
             .option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t").load())
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]
    ranges = (spark.readStream.format("orderedkafka").option("emit", "ranges")
              .option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t").load())
    assert ranges.columns == range_schema().names
    with pytest.raises(Exception, match="emit"):
        (spark.readStream.format("orderedkafka").option("emit", "everything")
         .option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t").load())
