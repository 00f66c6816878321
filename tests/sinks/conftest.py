"""Fixtures for the sink tests: one table location per storage target (local and real S3)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import unique


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], tuple[str, dict]]:
    """Factory: ``target(name) -> (url, storage_options)`` on a local dir or SeaweedFS S3."""
    if request.param == "local":
        return lambda name: (str(tmp_path / unique(name)), {})
    s3 = request.getfixturevalue("s3")
    return lambda name: (s3.url(unique(name)), s3.storage_options)


@pytest.fixture
def s3_table(s3: Any) -> Callable[[str], tuple[str, dict]]:
    return lambda name: (s3.url(unique(name)), s3.storage_options)
