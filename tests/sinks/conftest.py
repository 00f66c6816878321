"""Fixtures for the sink tests: one table location per storage target (local and real S3)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import unique


@pytest.fixture(params=["local", "s3", "azure"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], tuple[str, dict]]:
    """Factory: ``target(name) -> (url, storage_options)`` on a local dir, SeaweedFS S3 or
    Azurite. (Not the GCS emulator: fake-gcs-server has no XML API object PUT, which delta-rs
    writes with; docs/storage.md.)"""
    if request.param == "local":
        return lambda name: (str(tmp_path / unique(name)), {})
    if request.param == "azure":
        azurite = request.getfixturevalue("azurite")
        return lambda name: (azurite.url(unique(name)), azurite.storage_options)
    s3 = request.getfixturevalue("s3")
    return lambda name: (s3.url(unique(name)), s3.storage_options)


@pytest.fixture
def s3_table(s3: Any) -> Callable[[str], tuple[str, dict]]:
    return lambda name: (s3.url(unique(name)), s3.storage_options)
