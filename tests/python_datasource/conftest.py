"""The orderedkafka tests use the shared broker and Spark of tests/fixtures.py (registered by
tests/conftest.py); their helpers are in ``tests.python_datasource.source_helpers``."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["native", "python"])
def reader(request: pytest.FixtureRequest) -> str:
    """The source option ``reader``: tests that read run with both readers. ``native`` fails
    (never skips) when ``orderedstream._kafka_native`` is not built: scripts/bootstrap.sh
    builds it, and a failed build must show."""
    return str(request.param)
