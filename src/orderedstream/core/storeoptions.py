"""The pack's storage options per location URL, and the fsspec filesystem they open.

``storage_options`` hold endpoints, never credentials: each process that opens a
filesystem reads those from the environment (docs/storage.md). Everything here runs where
it is called, on the driver or an executor; ``orderedstream.core.storage`` re-exports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from orderedstream.core.azureauth import azure_endpoint_fs_options


def s3_endpoint_options(endpoint: str | None = None, *,
                        region: str | None = None) -> dict[str, Any]:
    """s3fs options for an S3-compatible endpoint (path-style addressing, bounded retries).

    Carries no credentials: botocore's standard chain gives them (the ``AWS_*`` variables,
    ``AWS_PROFILE`` and the shared credentials file, an instance or container role).

    Parameters
    ----------
    endpoint
        The endpoint's URL; None: AWS itself.
    region
        The region; None: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else us-east-1.

    Returns
    -------
    dict
        ``client_kwargs`` and ``config_kwargs`` for ``s3fs.S3FileSystem``."""
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    client: dict[str, Any] = {"region_name": region or "us-east-1"}
    if endpoint:
        client["endpoint_url"] = endpoint
    return {
        "client_kwargs": client,
        "config_kwargs": {"s3": {"addressing_style": "path"},
                          # botocore's own form: it rewrites max_attempts in place
                          "retries": {"total_max_attempts": 4, "mode": "standard"},
                          "connect_timeout": 5, "read_timeout": 30},
    }


GCS_SCHEMES = ("gs", "gcs")
AZURE_SCHEMES = ("az", "abfs", "abfss", "adl")


def url_scheme(url: str) -> str:
    """The lower-case scheme of ``url`` (``"file"`` for a plain path).

    Parameters
    ----------
    url
        A location URL or a plain path."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def gcs_endpoint_options(endpoint: str | None = None) -> dict[str, Any]:
    """The pack's storage options for ``gs://`` URLs, as ``{"gcs": {"endpoint": ...}}``.

    Carries no credentials: gcsfs takes them from ``GOOGLE_APPLICATION_CREDENTIALS`` or the
    application default credentials; an ``http://`` endpoint (an emulator) needs none.

    Parameters
    ----------
    endpoint
        An emulator's or a private endpoint's URL; None (``{}``): Google Cloud Storage."""
    return {"gcs": {"endpoint": endpoint}} if endpoint else {}


def azure_endpoint_options(endpoint: str | None = None) -> dict[str, Any]:
    """The pack's storage options for ``az://`` / ``abfs://`` URLs, as
    ``{"azure": {"endpoint": ...}}``.

    Carries no credentials: they come from the environment (``AZURE_STORAGE_ACCOUNT_NAME``
    with ``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN``, a service principal's
    ``AZURE_CLIENT_ID`` / ``AZURE_CLIENT_SECRET`` / ``AZURE_TENANT_ID``, a managed identity).

    Parameters
    ----------
    endpoint
        The blob endpoint of an emulator or a private endpoint
        (``http://127.0.0.1:10000/devstoreaccount1`` for Azurite); None (``{}``): the
        account's public endpoint."""
    return {"azure": {"endpoint": endpoint}} if endpoint else {}


def endpoint_options(*, s3: str | None = None, gcs: str | None = None,
                     azure: str | None = None) -> dict[str, Any]:
    """The pack's ``storage_options`` for the given endpoints, without credentials:
    ``s3_endpoint_options`` plus the ``gcs`` / ``azure`` entries.

    Parameters
    ----------
    s3, gcs, azure
        Each store's endpoint URL; None: that store's public service (for ``s3``, no S3
        options at all)."""
    return {**(s3_endpoint_options(s3) if s3 else {}), **gcs_endpoint_options(gcs),
            **azure_endpoint_options(azure)}


def fs_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fsspec keyword arguments for ``url``'s filesystem from the pack's options.

    Credentials are read from the environment here, in the process that opens the
    filesystem, and never stored in ``storage_options``.

    Parameters
    ----------
    url
        A location URL or a local path.
    storage_options
        The pack's storage options.

    Returns
    -------
    dict
        Empty for a local URL; the ``"gcs"`` entry as gcsfs's for ``gs://``, the ``"azure"``
        entry as adlfs's for ``az://`` / ``abfs://``; the rest (s3fs's) for other URLs."""
    if is_local_url(url):
        return {}
    options = dict(storage_options or {})
    gcs = dict(options.pop("gcs", None) or {})
    azure = dict(options.pop("azure", None) or {})
    scheme = url_scheme(url)
    if scheme in GCS_SCHEMES:
        endpoint = gcs.pop("endpoint", None)
        if endpoint:
            gcs.setdefault("endpoint_url", str(endpoint).rstrip("/"))
            if str(endpoint).startswith("http://"):
                gcs.setdefault("token", "anon")
        return gcs
    if scheme in AZURE_SCHEMES:
        endpoint = azure.pop("endpoint", None)
        if endpoint and "connection_string" not in azure:
            azure.update(azure_endpoint_fs_options(str(endpoint).rstrip("/")))
        return azure
    return options


def url_to_fs(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs`` with the pack's ``storage_options`` (``fs_options``). A
    ``gs://`` URL with an endpoint of its own (an emulator, a private endpoint) gets gcsfs's
    plain ``GCSFileSystem``: its experimental zonal/hierarchical class probes each bucket over
    gRPC, which emulators do not serve. Scoped to this filesystem object; nothing else changes.

    Parameters
    ----------
    url
        A location URL (``s3://``, ``gs://``, ``az://``, ``abfs://``, ``file://`` or a path).
    storage_options
        The pack's storage options for that URL (endpoint, credentials' environment).

    Returns
    -------
    tuple
        The fsspec filesystem and the path inside it.

    Runs on
    -------
    both (the process that opens the filesystem reads the credentials)"""
    import fsspec

    options = fs_options(url, storage_options)
    if url_scheme(url) in GCS_SCHEMES and options.get("endpoint_url"):
        from gcsfs.core import GCSFileSystem

        fs = GCSFileSystem(**options)
        return fs, fs._strip_protocol(url)
    return fsspec.core.url_to_fs(url, **options)  # type: ignore[no-any-return]


def private_options(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` for a filesystem instance of one's own (not fsspec's shared one).

    fsspec shares one instance per options in a process, listing cache included, whose
    updates are not thread-safe: a driver thread beside the batches' (the state cleanup)
    uses these.

    Parameters
    ----------
    storage_options
        The pack's storage options (None: none)."""
    return {**(storage_options or {}), "skip_instance_cache": True}


def is_local_url(url: str) -> bool:
    """Whether ``url`` is a local path or ``file://`` URL (no storage options apply to it).

    Parameters
    ----------
    url
        A location URL or a path."""
    return "://" not in url or url.startswith("file://")


def options_for(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The storage options that apply to ``url``, still in the pack's form (``fs_options``
    gives a filesystem's keyword arguments): none for a local URL, so a job's local output
    beside S3 state takes the S3 options only where they belong.

    Parameters
    ----------
    url
        A location URL or a local path.
    storage_options
        The pack's storage options."""
    return {} if is_local_url(url) else dict(storage_options or {})
