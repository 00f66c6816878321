"""Fixtures for the sink tests: a table location on real S3 (``target``, local or S3, is
shared: tests/fixtures.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures import unique


@pytest.fixture
def s3_table(s3: Any) -> Callable[[str], tuple[str, dict]]:
    return lambda name: (s3.url(unique(name)), s3.storage_options)
