"""adlfs options for an Azure endpoint of one's own (Azurite, a private endpoint) from the
standard environment variables, built in memory in the process that opens the filesystem:
an account key or SAS token goes into a connection string; without either, an ``https://``
endpoint gets ``account_name`` / ``account_host`` and adlfs's ``DefaultAzureCredential``
(a service principal from ``AZURE_CLIENT_ID`` / ``AZURE_TENANT_ID`` /
``AZURE_CLIENT_SECRET``, else a managed identity)."""

from __future__ import annotations

import os
from typing import Any

from orderedstream.core.errors import UnsupportedStorageError


def azure_endpoint_fs_options(endpoint: str) -> dict[str, Any]:
    """adlfs keyword arguments for ``endpoint`` (no trailing slash).

    Parameters
    ----------
    endpoint
        The Blob service URL (``--azure-endpoint``): an emulator's ``http://`` URL or a
        private ``https://`` endpoint.

    Returns
    -------
    dict
        A connection string built from the account key or SAS token in the environment, or,
        without either, the account and host for adlfs's ``DefaultAzureCredential``.

    Raises
    ------
    UnsupportedStorageError
        No storage account named in the environment.

    Runs on
    -------
    both"""
    if endpoint.startswith("https://") and not _azure_shared_key_or_sas():
        return {"account_name": _azure_account(endpoint),
                "account_host": endpoint.removeprefix("https://")}
    return {"connection_string": _azure_connection_string(endpoint)}


def _azure_shared_key_or_sas() -> bool:
    return bool(os.environ.get("AZURE_STORAGE_ACCOUNT_KEY") or os.environ.get(
        "AZURE_STORAGE_KEY") or os.environ.get("AZURE_STORAGE_SAS_TOKEN"))


def _azure_account(endpoint: str) -> str:
    account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get(
        "AZURE_STORAGE_ACCOUNT")
    if not account:
        raise UnsupportedStorageError(
            f"Azure endpoint {endpoint}: no storage account named. Set AZURE_STORAGE_ACCOUNT_NAME "
            "(with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN) in the environment")
    return account


def _azure_connection_string(endpoint: str) -> str:
    """An Azure Storage connection string for ``endpoint`` with the environment's account
    name and key or SAS token (only in memory, in the process that opens the filesystem)."""
    account = _azure_account(endpoint)
    parts = [f"DefaultEndpointsProtocol={endpoint.split('://', 1)[0]}",
             f"AccountName={account}", f"BlobEndpoint={endpoint}"]
    key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY") or os.environ.get("AZURE_STORAGE_KEY")
    sas = os.environ.get("AZURE_STORAGE_SAS_TOKEN")
    if key:
        parts.append(f"AccountKey={key}")
    elif sas:
        parts.append(f"SharedAccessSignature={sas.lstrip('?')}")
    return ";".join(parts) + ";"
