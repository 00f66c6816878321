"""Delta output on gs:// is checked at start with delta-rs's own write: on fake-gcs-server,
which has no XML API PUT of an object (the only way Rust's object_store writes to GCS), the
writer is refused before a batch runs, naming the store and what to use instead."""

from __future__ import annotations

import pytest

from orderedstream.core.errors import LocationError
from orderedstream.sinks.deltafiles import check_delta_writes
from tests.fixtures import unique


def test_delta_output_on_an_emulator_without_the_xml_api_is_refused_at_start(gcs) -> None:
    url = gcs.url(unique("delta"))
    with pytest.raises(LocationError) as info:
        check_delta_writes(url, "fenceddelta output", gcs.storage_options)
    message = str(info.value)
    assert message.startswith(f"fenceddelta output location {url!r}: Google Cloud Storage at "
                              f"{gcs.endpoint} refused delta-rs's write (")
    assert "PUT" in message and "fencedparquet" in message
    assert gcs.filesystem().find(url.removeprefix("gs://")) == []  # the probe left nothing


def test_the_delta_write_check_is_a_no_op_off_gcs(tmp_path) -> None:
    check_delta_writes(str(tmp_path / "t"), "output", None)
    assert not (tmp_path / "t").exists()
