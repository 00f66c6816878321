"""``spark.read.format("rocksstate")`` over committed versions on real S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from orderedstream.statestore import EMPTY_VERSION, SchemaCodec, StateLocation, StateStoreOptions
from orderedstream.statestore.rocksdb.store import RocksDBStateStore
from pyspark_rocksstate import DefaultSource

ORDER_SCHEMA = pa.schema([("customer", pa.string()), ("total", pa.float64()),
                          ("items", pa.list_(pa.int64()))])


@pytest.fixture
def rocksstate(spark: Any) -> Any:
    """The session with ``rocksstate`` registered (static registration when the package is
    on the workers' path; the explicit register covers editable installs)."""
    spark.dataSource.register(DefaultSource)
    return spark


def _reader(spark: Any, store: RocksDBStateStore, **options: Any) -> Any:
    reader = (spark.read.format("rocksstate").option("location", store.location.url)
              .option("storage_options", json.dumps(dict(store.location.storage_options))))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


@pytest.mark.parametrize("changelog", [False, True], ids=["checkpoints", "changelog"])
def test_reads_committed_versions_as_dataframe(rocksstate: Any, s3: Any, s3_url: str,
                                                tmp_path: Path, changelog: bool) -> None:
    # changelog: version 1 is version 0's checkpoint plus a write log the executor replays.
    location = StateLocation(s3_url, storage_options=s3.storage_options)
    store = RocksDBStateStore(location, StateStoreOptions(
        local_dir=str(tmp_path / "local"), space_codecs={"orders": SchemaCodec(ORDER_SCHEMA)},
        changelog=changelog))
    for p in (0, 1):
        with store.open(p, EMPTY_VERSION) as part:
            part.put_many((f"p{p}-k{i:03d}", {"i": i, "p": p}) for i in range(200))
            part.put(f"o{p}", {"customer": f"c{p}", "total": 1.5 + p, "items": [p, 2]},
                     space="orders", ttl_ms=1000, now_ms=5000)
            part.commit(0)
            part.delete(f"p{p}-k000")
            part.put(f"p{p}-new", {"i": -1, "p": p})
            part.commit(1)

    assert len(store.read_manifest(0, 1).changelog) == int(changelog)
    latest = _reader(rocksstate, store)
    rows = latest.where("space = 'default'").collect()
    assert len(rows) == 2 * 200  # 200 - 1 deleted + 1 new per partition
    assert {r.version for r in rows} == {1}
    by_key = {r.key_str: r for r in rows}
    assert json.loads(by_key["p1-k007"].value) == {"i": 7, "p": 1}
    assert by_key["p1-k007"].partition == 1 and bytes(by_key["p1-k007"].key) == b"p1-k007"
    assert "p0-k000" not in by_key and "p0-new" in by_key

    old = _reader(rocksstate, store, version=0, partition=0).collect()
    assert {r.key_str for r in old if r.space == "default"} == {f"p0-k{i:03d}"
                                                                 for i in range(200)}

    typed = _reader(rocksstate, store, space="orders")
    assert typed.schema["value"].dataType.simpleString() == \
        "struct<customer:string,total:double,items:array<bigint>>"
    orders = sorted(typed.collect(), key=lambda r: r.partition)
    assert [(o.value.customer, o.value.total, list(o.value["items"]), o.expires_at_ms)
            for o in orders] == [("c0", 1.5, [0, 2], 6000), ("c1", 2.5, [1, 2], 6000)]


def test_bad_options_name_what_is_wrong(rocksstate: Any, s3: Any, s3_url: str,
                                        tmp_path: Path) -> None:
    with pytest.raises(Exception, match="needs option 'location'"):
        rocksstate.read.format("rocksstate").load().collect()
    store = RocksDBStateStore(StateLocation(s3_url, storage_options=s3.storage_options),
                              StateStoreOptions(local_dir=str(tmp_path / "l")))
    with pytest.raises(Exception, match=f"no state partition was ever committed at {s3_url}"):
        _reader(rocksstate, store).collect()  # nothing committed there (yet)
    with store.open(0, EMPTY_VERSION) as part:
        part.put("k", 1)
        part.commit(0)
    with pytest.raises(Exception, match="version 7 of partition 0 was never committed"):
        _reader(rocksstate, store, version=7).collect()
    with pytest.raises(Exception, match="version='x': a non-negative integer"):
        _reader(rocksstate, store, version="x").collect()
    # a misspelled option is refused (it would have read the latest state of every partition)
    with pytest.raises(Exception, match=r"rocksstate does not know option 'versoin' \(did you "
                                        r"mean 'version'\?\)"):
        _reader(rocksstate, store, versoin=0).collect()
    # storage_options that are not JSON: refused without echoing them (they hold S3 keys)
    with pytest.raises(Exception) as excinfo:
        (rocksstate.read.format("rocksstate").option("location", s3_url)
         .option("storage_options", "{'key': 'AKIA', 'secret': 'TOP-SECRET-VALUE'}").load()
         .collect())
    assert "must be a JSON object of fsspec arguments" in str(excinfo.value)
    assert "TOP-SECRET-VALUE" not in str(excinfo.value)
