"""The state store's public surface: keyword-only options, no catch-all constructor arguments,
specific error classes, and a package import that does not load rocksdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orderedstream.core.errors import (
    CorruptStateError,
    InvariantError,
    OptionError,
    StateValueError,
    UnsupportedFormatError,
)
from orderedstream.statestore import (
    BytesCodec,
    CommitMetrics,
    StateLocation,
    StateStoreOptions,
)
from orderedstream.statestore.codecs import SchemaCodec
from orderedstream.statestore.manifest import FORMAT, FileEntry, Manifest
from orderedstream.statestore.restore import cache_name
from orderedstream.statestore.retention import cleanup_partition
from orderedstream.statestore.rocksdb.db import encode_key
from orderedstream.statestore.rocksdb.store import RocksDBStateStore


def test_options_and_records_are_keyword_only() -> None:
    positional: Any = StateStoreOptions
    with pytest.raises(TypeError):
        positional(BytesCodec())
    location: Any = StateLocation
    with pytest.raises(TypeError):
        location("file:///tmp/s", {"anon": True})
    assert StateLocation("file:///tmp/s/", storage_options={"a": 1}).url == "file:///tmp/s"
    with pytest.raises(OptionError, match="mapping"):
        StateLocation("file:///tmp/s", storage_options=["anon"])  # type: ignore[arg-type]
    metrics: Any = CommitMetrics
    with pytest.raises(TypeError):
        metrics(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11.0, 12.0, 13.0, "m")


def test_store_takes_storage_options_by_name_only(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/state"
    store = RocksDBStateStore(url, storage_options={"auto_mkdir": True})
    assert store.location == StateLocation(url, storage_options={"auto_mkdir": True})
    assert store.location.storage_options == {"auto_mkdir": True}
    with pytest.raises(OptionError, match="not both"):
        RocksDBStateStore(store.location, storage_options={"auto_mkdir": True})
    typo: Any = RocksDBStateStore
    with pytest.raises(TypeError):
        typo(url, endpoint_url="http://localhost:1")  # was silently a storage option


def test_newer_manifest_format_is_unsupported_not_corrupt() -> None:
    entry = FileEntry(name="CURRENT", size=1, sha256="0" * 64, inline="eA==")
    manifest = Manifest(partition=0, version=1, parent_version=0, parent_manifest=None,
                        files=(entry,), num_keys=0, key_counts={}, spaces={}, writer={},
                        created_at=0.0)
    data = json.loads(manifest.to_json())
    assert Manifest.from_json(manifest.to_json()) == manifest
    with pytest.raises(UnsupportedFormatError, match="newer"):
        Manifest.from_json(json.dumps({**data, "format": FORMAT + 1}).encode(), "m.json")
    for garbled in (b"{", b"[1]", json.dumps({**data, "format": "x"}).encode(),
                    json.dumps({**data, "files": [{"bogus": 1}]}).encode()):
        with pytest.raises(CorruptStateError, match="unreadable"):
            Manifest.from_json(garbled, "m.json")


def test_bad_keys_and_values_raise_state_value_errors() -> None:
    import pyarrow as pa

    with pytest.raises(StateValueError, match="bytes or str"):
        encode_key(42)  # type: ignore[arg-type]
    with pytest.raises(StateValueError, match="bytes only"):
        BytesCodec().encode("text")
    codec = SchemaCodec(pa.schema([("n", pa.int64())]))
    with pytest.raises(StateValueError, match="mappings"):
        codec.encode([1])
    with pytest.raises(StateValueError, match="not in the state schema"):
        codec.encode({"n": 1, "extra": 2})
    assert isinstance(StateValueError("x"), ValueError)  # callers catching ValueError still do


def test_internal_invariants_and_option_checks_raise_specific_errors() -> None:
    with pytest.raises(InvariantError, match="inlined"):
        cache_name(FileEntry(name="CURRENT", size=1, sha256="0" * 64, inline="eA=="))
    with pytest.raises(InvariantError, match="not inlined"):
        FileEntry(name="1.sst", size=1, sha256="0" * 64, remote="p=0/sst/1.sst").content()
    with pytest.raises(OptionError, match="keep_last"):
        cleanup_partition(None, "", None, 0, keep_last=0)  # type: ignore[arg-type]


def test_package_import_loads_no_rocksdict_and_exports_the_store_lazily() -> None:
    code = ("import sys, orderedstream.statestore as s; assert 'rocksdict' not in sys.modules; "
            "assert not hasattr(s, 'StateStore'); "
            "from orderedstream.statestore import RocksDBStateStore; "
            "assert 'rocksdict' in sys.modules; print(RocksDBStateStore.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "orderedstream.statestore.rocksdb.store"
