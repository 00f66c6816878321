"""Azure credentials from a SAS token alone (``AZURE_STORAGE_SAS_TOKEN``, no account key), on
Azurite: the pack's own writes (adlfs), the start check, and delta-rs's Delta writes and reads
all take it from the environment; it appears in no ``storage_options``."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from orderedstream.core import storage
from orderedstream.core.location import check_location
from orderedstream.sinks.deltafiles import delta_storage_options
from tests.fixtures import unique


def _sas(account_key: str, *, write: bool = True) -> str:
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    from orderedstream.dev.services.azurite import ACCOUNT

    return generate_account_sas(
        ACCOUNT, account_key, ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=write, delete=write, list=True, add=write,
                              create=write),
        expiry=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))


@pytest.fixture
def sas_only(azurite, monkeypatch: pytest.MonkeyPatch) -> str:
    from orderedstream.dev.services.azurite import ACCOUNT_KEY

    token = _sas(ACCOUNT_KEY)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_KEY", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", token)
    return token


def test_a_sas_token_alone_writes_the_commit_log_and_passes_the_start_check(
        azurite, sas_only: str) -> None:
    url = azurite.url(unique("sas"))
    check_location(url, "state", azurite.storage_options)
    fs, root = storage.url_to_fs(url, azurite.storage_options)
    assert storage.create_exclusive(fs, f"{root}/once", b"1")
    assert not storage.create_exclusive(fs, f"{root}/once", b"2")
    assert sas_only not in repr(azurite.storage_options)


def test_delta_rs_writes_and_reads_with_a_sas_token_alone(azurite, sas_only: str) -> None:
    from deltalake import DeltaTable, write_deltalake

    url = azurite.url(unique("sasdelta"))
    options = delta_storage_options(url, azurite.storage_options)
    with pytest.MonkeyPatch.context() as nothing:  # no credentials at all: refused
        nothing.delenv("AZURE_STORAGE_SAS_TOKEN")
        with pytest.raises(Exception, match="(?i)auth|40[13]"):
            write_deltalake(url, pa.table({"a": [0]}), storage_options=options)
    assert sas_only not in repr(options) and not any("key" in k.lower() for k in options)
    write_deltalake(url, pa.table({"a": [1, 2]}), storage_options=options)
    write_deltalake(url, pa.table({"a": [3]}), storage_options=options, mode="append")
    table = DeltaTable(url, storage_options=options)
    assert (table.version(), sorted(table.to_pyarrow_table()["a"].to_pylist())) == (1, [1, 2, 3])


def test_a_read_only_sas_token_is_refused_at_start_naming_the_store(
        azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    from orderedstream.core.errors import LocationError
    from orderedstream.dev.services.azurite import ACCOUNT_KEY

    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", _sas(ACCOUNT_KEY, write=False))
    url = azurite.url(unique("readonly"))
    with pytest.raises(LocationError) as info:
        check_location(url, "output", azurite.storage_options)
    assert str(info.value).startswith(f"output location {url!r} on Azure Blob Storage is not "
                                      "writable (")


def test_a_service_principal_on_an_https_endpoint_is_left_to_default_azure_credential(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No key or SAS: adlfs gets the account and host (``DefaultAzureCredential`` reads the
    service principal or managed identity itself); the secret is in no option."""
    for name in ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "not-a-real-secret")
    url = "az://lake/x"
    given = {"azure": {"endpoint": "https://acct.privatelink.blob.core.windows.net/"}}
    options = storage.fs_options(url, given)
    assert options == {"account_name": "acct",
                       "account_host": "acct.privatelink.blob.core.windows.net"}
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "sv=x&sig=y")
    assert storage.fs_options(url, given)["connection_string"].endswith(
        "SharedAccessSignature=sv=x&sig=y;")
