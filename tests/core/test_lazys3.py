"""S3 filesystems created only when needed (``core.lazys3``), against the real local S3
(SeaweedFS): a worker that only writes (state commits, output files) never imports s3fs, and
anything else gets the s3fs filesystem fsspec would have given."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import fsspec

from orderedstream.core import lazys3, objectstore, storage
from orderedstream.dev.services.s3 import S3Server
from tests.fixtures import unique

_WORKER = textwrap.dedent("""
    import json, sys
    import pyarrow as pa
    from orderedstream.sinks.writer import FencedParquetOptions, write_parquet_files
    from orderedstream.statestore import EMPTY_VERSION, StateLocation, StateStoreOptions
    from orderedstream.statestore.ordered.state_access import RecordVersionIndex
    from orderedstream.statestore.rocksdb.store import RocksDBStateStore

    args = json.loads(sys.argv[1])
    location = StateLocation(args["state"], storage_options=args["options"])
    version, manifest, files = EMPTY_VERSION, None, []
    for batch in range(3):  # as the ordered stage: versions named by the driver's records
        index = RecordVersionIndex({(0, version): manifest} if manifest else {})
        store = RocksDBStateStore(location, StateStoreOptions(local_dir=args["local"]),
                                  index=index)
        with store.open(0, version) as part:
            part.put_many((f"k{i}", {"batch": batch, "i": i}) for i in range(200))
            version, manifest = batch, part.commit(batch).manifest_path
        table = pa.table({"k": [f"k{i}" for i in range(50)], "batch": [batch] * 50})
        files += write_parquet_files(table.to_batches(), FencedParquetOptions(
            path=args["output"], storage_options=args["options"]))
    print(json.dumps({"s3fs": "s3fs" in sys.modules, "botocore": "botocore" in sys.modules,
                      "files": [f.path for f in files], "version": version}))
""")


def test_a_worker_that_only_writes_never_imports_s3fs(s3: S3Server, tmp_path: Path) -> None:
    base = s3.url(unique("lazy"))
    args = {"state": f"{base}/state", "output": f"{base}/out", "local": str(tmp_path / "local"),
            "options": s3.storage_options}
    done = subprocess.run([sys.executable, "-c", _WORKER, json.dumps(args)], check=True,
                          capture_output=True, text=True, timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["s3fs"] is False and result["botocore"] is False, result
    # what it wrote is there, read back through s3fs
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3.storage_options)
    assert len(result["files"]) == 3
    for path in result["files"]:
        assert fs.cat_file(f"{base}/out/{path}")[:4] == b"PAR1"
    assert fs.ls(f"{base}/state".removeprefix("s3://"))


def test_reads_and_listings_go_to_the_s3fs_filesystem(s3: S3Server) -> None:
    url = s3.url(unique("lazyread"))
    fs, root = lazys3.url_to_fs(url + "/", s3.storage_options)
    assert isinstance(fs, lazys3.LazyS3FileSystem) and not fs.created
    assert root == url.removeprefix("s3://")
    assert storage.create_exclusive(fs, f"{root}/a", b"one") is True  # obstore
    assert storage.create_exclusive(fs, f"{root}/a", b"two") is False  # read back: obstore
    assert storage.read_object(fs, f"{root}/a") == b"one"
    assert not fs.created
    assert fs.cat_file(f"{root}/a") == b"one"  # s3fs
    assert fs.created
    assert [p.rsplit("/", 1)[1] for p in fs.ls(root)] == ["a"]
    assert objectstore.put(fs, f"{root}/b", b"x") is True
    assert fs.exists(f"{root}/b")  # the listing cache of the put path was dropped
    # the same (cached) filesystem as fsspec's
    shared = fsspec.filesystem("s3", **s3.storage_options)
    assert fs.filesystem() is shared
    # a lazy filesystem that never created s3fs drops the shared one's listing of what it
    # writes or deletes through obstore (a commit log's s3fs may have listed the folder)
    other, _ = lazys3.url_to_fs(url, s3.storage_options)
    assert objectstore.put(other, f"{root}/c", b"y") is True and not other.created
    assert shared.exists(f"{root}/c")
    assert objectstore.delete_many(other, [f"{root}/c"]) is True and not other.created
    assert not shared.exists(f"{root}/c")


def test_pickles_as_its_options(s3: S3Server) -> None:
    fs, _ = lazys3.url_to_fs(s3.url("x"), s3.storage_options)
    fs.filesystem()
    copy = pickle.loads(pickle.dumps(fs))
    assert isinstance(copy, lazys3.LazyS3FileSystem) and not copy.created
    assert copy.storage_options == fs.storage_options


def test_what_obstore_does_not_serve_gets_fsspecs_filesystem(s3: S3Server,
                                                              tmp_path: Path) -> None:
    s3fs_type = type(fsspec.filesystem("s3", **s3.storage_options))
    fs, _ = lazys3.url_to_fs(s3.url("x"), {**s3.storage_options, "version_aware": True})
    assert type(fs) is s3fs_type
    fs, root = lazys3.url_to_fs(f"file://{tmp_path}", {})
    assert fs.protocol[0] == "file" and root == str(tmp_path)
    os.environ["ORDEREDSTREAM_NATIVE_S3"] = "0"
    try:
        fs, _ = lazys3.url_to_fs(s3.url("x"), s3.storage_options)
        assert type(fs) is s3fs_type
    finally:
        del os.environ["ORDEREDSTREAM_NATIVE_S3"]


def test_a_listing_popped_by_another_thread_mid_invalidation_is_no_error(s3: S3Server) -> None:
    """fsspec's ``DirCache.pop`` reads, then deletes: a thread whose listing is popped in
    between by another (a batch's commit log and the state cleanup share s3fs's instance)
    gets ``KeyError`` from s3fs; the lazy filesystem's invalidation finishes the job."""
    url = s3.url(unique("lazyrace"))
    fs, root = lazys3.url_to_fs(url, s3.storage_options)
    shared = fsspec.filesystem("s3", **s3.storage_options)
    assert objectstore.put(fs, f"{root}/a", b"x") is True
    shared.ls(root)  # a real listing, cached
    assert root in shared.dircache
    plain = type(shared.dircache)
    raced = []

    class Racing(plain):  # type: ignore[misc, valid-type]
        def __delitem__(self, key: str) -> None:
            if not raced:  # the other thread's pop lands between this pop's read and delete
                raced.append(key)
                self._cache.pop(key)
            super().__delitem__(key)

    shared.dircache.__class__ = Racing
    try:
        fs.invalidate_cache(f"{root}/a")
    finally:
        shared.dircache.__class__ = plain
    assert raced == [root] and root not in shared.dircache


def test_a_legacy_retries_setting_still_finds_the_shared_listing(s3: S3Server) -> None:
    """botocore rewrites ``retries: {max_attempts: n}`` as ``total_max_attempts: n + 1`` in the
    options' own dict when s3fs builds its client: the lazy filesystem still recognises the
    shared instance's options, and obstore retries the same either way."""
    config = dict(s3.storage_options["config_kwargs"])
    config["retries"] = {"max_attempts": 2, "mode": "standard"}
    options = {**s3.storage_options, "config_kwargs": config}
    url = s3.url(unique("lazylegacy"))
    fs, root = lazys3.url_to_fs(url, copy.deepcopy(options))  # as unpickled in a worker
    shared = fsspec.filesystem("s3", **options)
    assert objectstore.put(fs, f"{root}/a", b"x") is True
    shared.ls(root)  # builds the client: botocore rewrote the retries dict
    assert shared.storage_options["config_kwargs"]["retries"] == {
        "mode": "standard", "total_max_attempts": 3}
    assert fs.storage_options["config_kwargs"]["retries"] == {"max_attempts": 2,
                                                              "mode": "standard"}
    assert (objectstore.settings_for(shared.storage_options)
            == objectstore.settings_for(fs.storage_options))
    assert root in shared.dircache
    assert objectstore.put(fs, f"{root}/b", b"y") is True and not fs.created
    assert root not in shared.dircache
    assert sorted(p.rsplit("/", 1)[1] for p in shared.ls(root)) == ["a", "b"]
