"""The fencing primitives on every object store the pack writes to: local files, S3
(SeaweedFS), Google Cloud Storage (fake-gcs-server) and Azure Blob (Azurite), each a real
server started by a fixture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orderedstream.core import storage
from orderedstream.core.commitlog import CommitLog
from orderedstream.core.errors import CommitConflictError, FencedError, LocationError
from orderedstream.core.location import check_location
from tests.fixtures import unique


@pytest.fixture(params=["file", "s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """``(root URL, storage_options)`` of a fresh prefix on one store."""
    if request.param == "file":
        return f"file://{tmp_path / 'remote'}", {}
    server = request.getfixturevalue({"s3": "s3", "gcs": "gcs", "azure": "azurite"}[
        request.param])
    return server.url(unique("t")), server.storage_options


def _fs(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    fs, root = storage.url_to_fs(url, options)
    return fs, root.rstrip("/")


def test_create_if_absent_is_refused_the_second_time(store) -> None:
    fs, root = _fs(*store)
    path = f"{root}/log/00000001.json"
    assert storage.create_exclusive(fs, path, b"writer-a") is True
    assert storage.create_exclusive(fs, path, b"writer-b") is False
    # the retry of a create that had in fact succeeded is told the truth
    assert storage.create_exclusive(fs, path, b"writer-a") is True
    assert storage.read_object(fs, path) == b"writer-a"


def test_compare_and_swap_lets_one_writer_win(store) -> None:
    fs, root = _fs(*store)
    path = f"{root}/epoch.json"
    assert storage.replace_if_unchanged(fs, path, b"v1", None) is True
    current = storage.read_versioned(fs, path)
    assert current is not None and current[0] == b"v1"
    assert storage.replace_if_unchanged(fs, path, b"v2-a", current[1]) is True
    # a second writer that read v1 too is refused: its tag is stale
    assert storage.replace_if_unchanged(fs, path, b"v2-b", current[1]) is False
    assert storage.read_object(fs, path) == b"v2-a"
    newer = storage.read_versioned(fs, path)
    assert newer is not None and newer[1] != current[1]
    assert storage.replace_if_unchanged(fs, path, b"v3", newer[1]) is True
    assert storage.read_object(fs, path) == b"v3"


def test_fenced_commit_log_on_every_store(store) -> None:
    """Zombie fencing: a writer whose epoch was taken over cannot commit, the new one can;
    a batch is committed once."""
    url, options = store
    old = CommitLog(url, options).claim_epoch("writer-old")
    new_log = CommitLog(url, options)
    new = new_log.claim_epoch("writer-new")
    assert new.number == old.number + 1
    with pytest.raises(FencedError):
        CommitLog(url, options).commit(0, old, [])
    record = new_log.commit(0, new, [])
    assert record.batch_id == 0
    assert new_log.commit(0, new, []).batch_id == 0  # a retry is idempotent
    with pytest.raises((CommitConflictError, FencedError)):
        CommitLog(url, options).commit(0, old, [])
    assert CommitLog(url, options).latest() == 0


@pytest.mark.parametrize("kind", ["gcs", "azure"])
def test_a_writable_cloud_location_passes_the_start_check(kind, request) -> None:
    server = request.getfixturevalue("gcs" if kind == "gcs" else "azurite")
    check_location(server.url(unique("ok")), "state", server.storage_options)


@pytest.mark.parametrize("kind", ["gcs", "azure"])
def test_a_missing_bucket_or_container_fails_at_start_naming_it(kind, request) -> None:
    server = request.getfixturevalue("gcs" if kind == "gcs" else "azurite")
    missing = unique("absent")
    url = server.url().replace(f"//{server.url().split('//', 1)[1]}", f"//{missing}") + "/x"
    with pytest.raises(LocationError) as info:
        check_location(url, "output", server.storage_options)
    message = str(info.value)
    word = "bucket" if kind == "gcs" else "container"
    assert message.startswith(f"output location {url!r}: {word} {missing!r} does not exist")
    assert "Create it" in message


def test_refused_azure_credentials_fail_at_start_naming_the_store(
        azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "d3Jvbmcta2V5LW5vdC1henVyaXRlcw==")
    url = azurite.url(unique("denied"))
    with pytest.raises(LocationError) as info:
        check_location(url, "state", azurite.storage_options)
    message = str(info.value)
    # adlfs answers the container check without raising: the probe write is refused
    assert message.startswith(f"state location {url!r} on Azure Blob Storage is not writable "
                              "(HttpResponseError: Server failed to authenticate")
    assert "AZURE_STORAGE_ACCOUNT_KEY" in message


def test_an_emulator_endpoint_gets_plain_gcsfs_without_the_environment_switch(gcs) -> None:
    """Without ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` gcsfs's default class probes each
    bucket over gRPC; a ``gs://`` URL with an endpoint of its own gets the plain class (that
    filesystem object only), and it reads and writes the emulator."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json, sys, gcsfs, gcsfs.core\n"
        "from orderedstream.core import storage\n"
        "url, options = json.loads(sys.argv[1])\n"
        "fs, root = storage.url_to_fs(url, options)\n"
        "fs.pipe_file(root + '/probe', b'ok')\n"
        "print(gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem,\n"
        "      type(fs) is gcsfs.core.GCSFileSystem, fs.cat_file(root + '/probe') == b'ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    arg = json.dumps([gcs.url(unique("plain")), gcs.storage_options])
    out = subprocess.run([sys.executable, "-c", code, arg], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "True", "True"]  # the default class is the extended one here
