"""The orderedkafka tests use the shared broker and Spark of tests/fixtures.py (registered by
tests/conftest.py); their helpers are in ``tests.python_datasource.source_helpers``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(params=["native", "python"])
def reader(request: pytest.FixtureRequest) -> str:
    """The source option ``reader``: tests that read run with both readers. ``native`` fails
    (never skips) when ``orderedstream._kafka_native`` is not built: scripts/bootstrap.sh
    builds it, and a failed build must show."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _close_pooled_consumers() -> Iterator[None]:
    """Each test leaves no pooled consumer behind (the broker may stop before the process)."""
    yield
    from orderedstream.python_datasource.consumer_pool import POOL

    POOL.clear()
