"""Builds the shim jar at collection time, before any SparkSession of this run starts.

Sessions the pack configures put ``shim.bundled_jar()`` on spark.jars when they start, so the
jar must exist before the first session; ``scripts/bootstrap.sh`` builds it too (a no-op here
then: the build is stamped). A build failure is kept and reported by the tests that need it.
"""

from __future__ import annotations

import pytest

from orderedstream.core.errors import ShimBuildError
from orderedstream.dev import shim

BUILD_ERROR: ShimBuildError | None = None
try:
    shim.build(quiet=True)
except ShimBuildError as exc:  # reported by the shim_jar fixture
    BUILD_ERROR = exc


@pytest.fixture(scope="session")
def shim_jar():  # type: ignore[no-untyped-def]
    """The built jar; fails the test (with Maven's output) when the build failed."""
    if BUILD_ERROR is not None:
        pytest.fail(f"the JVM shim did not build: {BUILD_ERROR}")
    jar = shim.bundled_jar()
    assert jar is not None, "shim.build() returned but orderedstream/jars/ has no shim jar"
    return jar
