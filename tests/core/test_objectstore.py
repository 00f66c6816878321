"""S3 writes through obstore against the real local S3 (SeaweedFS): the same answers as the
s3fs path they replace, and s3fs wherever the filesystem's settings do not map onto obstore."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import fsspec
import pytest

from orderedstream.core import objectstore, storage
from orderedstream.dev.services.s3 import S3Server
from tests.fixtures import unique


def _fs(s3: S3Server, **extra: object) -> object:
    return fsspec.filesystem("s3", skip_instance_cache=True, **s3.storage_options, **extra)


def test_conditional_create_overwrite_and_file_puts(s3: S3Server, tmp_path: Path) -> None:
    fs = _fs(s3)
    base = f"{s3.bucket}/{unique('obj')}"
    assert objectstore.native(fs, f"{base}/a")
    assert objectstore.put(fs, f"s3://{base}/a", b"first", create=True) is True
    assert objectstore.put(fs, f"{base}/a", b"second", create=True) is False  # exists
    assert fs.cat_file(f"{base}/a") == b"first"
    assert objectstore.put(fs, f"{base}/a", b"third") is True  # overwrite
    assert fs.cat_file(f"{base}/a") == b"third"
    # the commit primitive on top: a retried create of the same bytes is told the truth
    assert storage.create_exclusive(fs, f"{base}/log", b"token-1") is True
    assert storage.create_exclusive(fs, f"{base}/log", b"token-1") is True
    assert storage.create_exclusive(fs, f"{base}/log", b"token-2") is False
    big = tmp_path / "big.sst"
    big.write_bytes(os.urandom(7 << 20))  # above the 5 MiB part: a multipart put
    assert objectstore.put(fs, f"{base}/big.sst", str(big)) is True
    assert fs.cat_file(f"{base}/big.sst") == big.read_bytes()
    fs.ls(base)  # s3fs lists (and caches) the folder; a later put must be visible to it
    objectstore.put(fs, f"{base}/late", b"x")
    assert fs.exists(f"{base}/late")


def test_errors_name_the_url(s3: S3Server) -> None:
    fs = _fs(s3)
    with pytest.raises(OSError, match=r"S3 put of s3://no-such-bucket-[\w-]+/k failed"):
        objectstore.put(fs, f"no-such-bucket-{unique('b')}/k", b"x")


def test_small_files_are_one_put_larger_ones_an_s3fs_multipart_upload(s3: S3Server) -> None:
    fs = _fs(s3)
    base = f"{s3.bucket}/{unique('files')}"
    part = 5 << 20

    def handle(name: str) -> objectstore.SmallObjectFile:
        path = f"{base}/{name}"
        return objectstore.SmallObjectFile(fs, path,
                                           partial(fs.open, path, "wb", block_size=part))

    small = handle("small")
    small.write(b"abc")
    assert not fs.exists(f"{base}/small")  # nothing is visible before close
    small.close()
    assert fs.cat_file(f"{base}/small") == b"abc"
    two = handle("two")
    two.write(b"1" * part)
    two.write(b"2" * 10)
    two.close()
    assert fs.cat_file(f"{base}/two") == b"1" * part + b"2" * 10
    for name, parts in (("dropped-small", 1), ("dropped-large", 2)):
        dropped = handle(name)
        for _ in range(parts):
            dropped.write(b"z" * part)
        dropped.discard()  # the failure path: no object, not a partial one
        assert not fs.exists(f"{base}/{name}")


def test_settings_obstore_cannot_honour_keep_s3fs(s3: S3Server,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = f"{s3.bucket}/any"
    # request arguments obstore would not send (encryption, ACLs ...)
    assert not objectstore.native(_fs(s3, s3_additional_kwargs={"ACL": "private"}), path)
    # a CA bundle obstore would not be given
    custom_ca = {**s3.storage_options,
                 "client_kwargs": {**s3.storage_options["client_kwargs"], "verify": "/ca.pem"}}
    assert not objectstore.native(fsspec.filesystem("s3", skip_instance_cache=True,
                                                    **custom_ca), path)
    # credentials from botocore's chain (profile, role): not guessed
    options = {k: v for k, v in s3.storage_options.items() if k not in ("key", "secret")}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    chain = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    assert objectstore.put(chain, path, b"x") is None
    # ... unless the environment holds the pair botocore takes first
    env = s3.aws_env()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", env["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["AWS_SECRET_ACCESS_KEY"])
    assert objectstore.put(chain, path, b"y") is True
    monkeypatch.setenv("ORDEREDSTREAM_NATIVE_S3", "0")
    assert not objectstore.native(_fs(s3), path)
    assert not objectstore.native(fsspec.filesystem("file"), "/tmp/x")


def test_get_many_reads_every_object_and_names_the_missing_ones(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = _fs(s3)
    base = f"{s3.bucket}/{unique('many')}"
    paths = [f"{base}/m{i:02d}" for i in range(20)]
    for i, path in enumerate(paths):
        fs.pipe_file(path, f"content-{i}".encode())
    missing = f"s3://{base}/missing"
    got = objectstore.get_many(fs, [*paths, missing])
    assert got is not None
    assert [got[p] for p in paths] == [f"content-{i}".encode() for i in range(20)]
    assert isinstance(got[missing], FileNotFoundError) and missing in str(got[missing])
    elsewhere = f"no-such-bucket-{unique('b')}/k"
    failed = objectstore.get_many(fs, [elsewhere])
    assert failed is not None and isinstance(failed[elsewhere], OSError)
    assert f"s3://{elsewhere}" in str(failed[elsewhere])
    assert objectstore.get_many(fs, []) == {}
    assert objectstore.get(fs, paths[3]) == b"content-3"  # one object: the same answers
    with pytest.raises(FileNotFoundError, match=missing):
        objectstore.get(fs, missing)
    monkeypatch.setenv("ORDEREDSTREAM_NATIVE_S3", "0")
    assert objectstore.get_many(fs, paths) is None  # the caller reads with s3fs
    assert objectstore.get(fs, paths[3]) is None


def test_find_lists_by_path_segments_like_s3fs(s3: S3Server) -> None:
    fs = _fs(s3)
    base = f"{s3.bucket}/{unique('find')}"
    for rel in ("a/b/x", "a/b/c/y", "a/bc/z", "a/b"):
        fs.pipe_file(f"{base}/{rel}", b"1")
    fs.pipe_file(f"{base}/a/b/many/0", b"1")
    for i in range(1, 1205):  # more than one page of a listing
        objectstore.put(fs, f"{base}/a/b/many/{i}", b"1")
    found = objectstore.find(fs, f"s3://{base}/a/b/")
    assert found is not None
    assert sorted(found) == sorted(fs.find(f"{base}/a/b"))
    assert {f"{base}/a/b/x", f"{base}/a/b/c/y"} <= set(found)
    assert f"{base}/a/bc/z" not in found and len(found) == 2 + 1205
    assert objectstore.find(fs, f"{base}/nothing-here") == []


def test_delete_many_deletes_in_bulk_and_falls_back_to_the_caller(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = _fs(s3)
    base = f"{s3.bucket}/{unique('del')}"
    doomed = [f"{base}/x/{i}" for i in range(1203)]  # more than one DeleteObjects request
    for path in doomed:
        objectstore.put(fs, path, b"1")
    objectstore.put(fs, f"{base}/kept", b"k")
    fs.ls(f"{base}/x")  # a listing s3fs caches must not outlive the delete
    assert objectstore.delete_many(fs, [f"s3://{doomed[0]}", *doomed[1:],
                                        f"{base}/x/never-existed"]) is True
    assert objectstore.find(fs, base) == [f"{base}/kept"]
    assert not fs.exists(doomed[5])
    assert objectstore.delete_many(fs, []) is True
    with pytest.raises(OSError, match=r"s3://no-such-bucket-"):
        objectstore.delete_many(fs, [f"no-such-bucket-{unique('b')}/k"])
    monkeypatch.setenv("ORDEREDSTREAM_NATIVE_S3", "0")
    assert objectstore.delete_many(fs, [f"{base}/kept"]) is False  # the caller deletes
    assert fs.cat_file(f"{base}/kept") == b"k"
