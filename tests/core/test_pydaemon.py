"""The pack's worker daemon leaves out pyspark.zip only when it is the installed pyspark's."""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

from orderedstream.core.pydaemon import installed_zip_entries


def test_the_installed_packages_zip_is_left_out_and_any_other_zip_kept(tmp_path: Path) -> None:
    package = Path(pyspark.__file__).parent
    own = str(package / "python" / "lib" / "pyspark.zip")
    other = tmp_path / "spark-3" / "python" / "lib" / "pyspark.zip"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"")
    path = [own, str(other), *sys.path]
    assert installed_zip_entries(path) == [own]
    # without an installed pyspark on the rest of the path, the zip is all there is: kept
    assert installed_zip_entries([own, str(tmp_path)]) == []
