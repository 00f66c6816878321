"""The foundation's refusals and parsers, without services."""

from __future__ import annotations

import datetime

import fsspec
import pytest

from orderedstream.core import storage
from orderedstream.core.errors import OptionError, UnsupportedStorageError
from orderedstream.core.units import parse_duration_ms, parse_size_bytes


def test_storage_without_conditional_writes_is_refused_by_name() -> None:
    fs = fsspec.filesystem("memory")
    with pytest.raises(UnsupportedStorageError, match="no atomic create-if-absent"):
        storage.create_exclusive(fs, "/log/0.json", b"{}")
    with pytest.raises(UnsupportedStorageError, match="no compare-and-swap"):
        storage.replace_if_unchanged(fs, "/epoch.json", b"{}", "tag")
    assert not fs.exists("/log/0.json")


def test_s3_endpoint_options_carry_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    options = storage.s3_endpoint_options("http://127.0.0.1:9000")
    assert options["client_kwargs"] == {"endpoint_url": "http://127.0.0.1:9000",
                                        "region_name": "eu-west-1"}
    assert not {"key", "secret", "token"} & set(options)


@pytest.mark.parametrize(("text", "millis"), [
    ("1 hour", 3_600_000), ("90 seconds", 90_000), ("15m", 900_000), ("250ms", 250),
    ("2 weeks", 1_209_600_000), ("500", 500), (datetime.timedelta(minutes=2), 120_000)])
def test_durations(text: object, millis: int) -> None:
    assert parse_duration_ms(text) == millis  # type: ignore[arg-type]


def test_bad_durations_and_sizes_say_what_is_accepted() -> None:
    with pytest.raises(OptionError, match="option maxTriggerDelay: cannot parse 'soon' as a "
                                          "duration; use '<number> <unit>'"):
        parse_duration_ms("soon", "option maxTriggerDelay")
    with pytest.raises(OptionError, match="must be positive"):
        parse_duration_ms(0)
    assert parse_duration_ms("0s", allow_zero=True) == 0
    assert parse_size_bytes("128MB") == parse_size_bytes("128m") == 128 << 20
    with pytest.raises(OptionError, match="targetFileSize='big' is not a size"):
        parse_size_bytes("big", "targetFileSize")
