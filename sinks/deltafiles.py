"""Delta add actions of written files, and delta-rs storage options (driver side).

Executors write Delta data files with the ordinary Parquet writer
(``orderedstream.sinks.writer``, options with ``file_stats=True``: bounded memory, Hive
directories, unique names, never overwrite, plus each file's Delta statistics from
``orderedstream.sinks.filestats``). ``add_action(file)`` turns a returned ``DataFile`` into
delta-rs's ``AddAction``; ``delta_storage_options`` maps the pack's fsspec/s3fs
``storage_options`` to delta-rs's (object_store) options.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from orderedstream.core.datafile import DataFile
from orderedstream.sinks.writer import HIVE_NULL


def partition_values(file: DataFile) -> dict[str, str | None]:
    """The Delta ``partitionValues`` of a file: raw values (Hive escaping undone, null).

    Parameters
    ----------
    file
        A written file; its ``partition`` holds Hive-escaped directory values.

    Returns
    -------
    dict
        Column -> raw value, None for Hive's null partition.

    Runs on
    -------
    driver"""
    return {k: None if v == HIVE_NULL else urllib.parse.unquote(v)
            for k, v in file.partition.items()}


def add_action(file: DataFile, *, modification_ms: int | None = None) -> Any:
    """delta-rs ``AddAction`` of a written file (its path percent-encoded, as Delta's log
    stores paths: a Hive-escaped ``%3A`` in the object key is ``%253A`` in the log).

    Parameters
    ----------
    file
        A file the executors wrote (path relative to the table root, size, rows, stats).
    modification_ms
        The action's ``modificationTime`` in milliseconds since the epoch; None: now.

    Returns
    -------
    deltalake.transaction.AddAction
        The action, ``dataChange`` true, ``stats`` the file's (or just its row count).

    Runs on
    -------
    driver"""
    from deltalake.transaction import AddAction

    stats = dict(file.stats or {"numRecords": file.rows})
    return AddAction(urllib.parse.quote(file.path, safe="/="), int(file.size),
                     partition_values(file),
                     int(time.time() * 1000) if modification_ms is None else modification_ms,
                     True, json.dumps(stats, sort_keys=True))


def null_counts_in_not_null_columns(files: Iterable[DataFile], schema: Any,
                                    ) -> dict[str, int]:
    """Column -> nulls that ``files`` hold in the columns ``schema`` (pyarrow) declares not
    nullable, from the files' Delta statistics and partition values (Delta's NOT NULL
    invariant, which delta-rs does not check for files it is handed).

    Parameters
    ----------
    files
        The files about to be committed.
    schema
        The table's pyarrow schema after the batch.

    Returns
    -------
    dict
        Column -> null count, only for NOT NULL columns that hold nulls; empty when none do.

    Runs on
    -------
    driver"""
    required = [field.name for field in schema if not field.nullable]
    found: dict[str, int] = {}
    for file in files if required else ():
        counts = (file.stats or {}).get("nullCount") or {}
        partition = partition_values(file) if file.partition else {}
        for name in required:
            nulls = counts.get(name)
            if name in partition and partition[name] is None:
                nulls = file.rows
            if isinstance(nulls, int) and nulls > 0:
                found[name] = found.get(name, 0) + nulls
    return found


def log_path(delta_path: str) -> str:
    """The object key (relative to the table root) of a path as the Delta log writes it.

    Parameters
    ----------
    delta_path
        An add or remove action's ``path`` (percent-encoded).

    Returns
    -------
    str
        The path decoded once (Hive escapes stay).

    Runs on
    -------
    driver"""
    return urllib.parse.unquote(delta_path)


def is_s3(url: str) -> bool:
    """Whether ``url`` names S3 (``s3://`` or ``s3a://``, any case).

    Parameters
    ----------
    url
        A table location.

    Returns
    -------
    bool
        False for a path without a scheme.

    Runs on
    -------
    driver"""
    return url.split("://", 1)[0].lower() in ("s3", "s3a") if "://" in url else False


def delta_storage_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """delta-rs (object_store) options for ``url`` from the pack's s3fs ``storage_options``
    (``gs://`` and ``az://`` / ``abfs://`` URLs: ``_cloud_delta_options``).

    s3fs ``key`` / ``secret`` / ``token`` / ``endpoint_url`` (also inside ``client_kwargs``) and
    ``client_kwargs.region_name`` become ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
    ``AWS_SESSION_TOKEN`` / ``AWS_ENDPOINT_URL`` / ``AWS_REGION``; an ``http://`` endpoint adds
    ``AWS_ALLOW_HTTP=true``. Commits use S3 conditional put (``aws_conditional_put=etag``:
    ``If-None-Match: *`` on the log entry), which AWS S3, MinIO and SeaweedFS support, so no
    lock service is needed. Keys already in delta-rs form (``AWS_*`` / ``aws_*``) pass through
    and win. Without keys, delta-rs takes credentials from the AWS environment chain.

    Parameters
    ----------
    url
        The Delta table's location.
    storage_options
        The pack's storage options for ``url`` (s3fs keys, or the ``gcs`` / ``azure``
        entries).

    Returns
    -------
    dict
        delta-rs storage options; empty for a local path or another scheme.

    Runs on
    -------
    driver"""
    scheme = url.split("://", 1)[0].lower() if "://" in url else "file"
    if scheme in ("gs", "gcs", "az", "abfs", "abfss", "adl"):
        return _cloud_delta_options(scheme, storage_options)
    if not is_s3(url):
        return {}
    given = dict(storage_options or {})
    client = dict(given.get("client_kwargs") or {})
    endpoint = (given.get("endpoint_url") or client.get("endpoint_url")
                or os.environ.get("AWS_ENDPOINT_URL"))
    region = (client.get("region_name") or os.environ.get("AWS_REGION")
              or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    out: dict[str, str] = {"AWS_REGION": str(region), "aws_conditional_put": "etag"}
    if endpoint:
        out["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).lower().startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    for ours, theirs in (("key", "AWS_ACCESS_KEY_ID"), ("secret", "AWS_SECRET_ACCESS_KEY"),
                         ("token", "AWS_SESSION_TOKEN")):
        if given.get(ours):
            out[theirs] = str(given[ours])
    out.update({k: str(v) for k, v in given.items() if k.lower().startswith("aws_")})
    return out


def _cloud_delta_options(scheme: str, storage_options: Mapping[str, Any] | None,
                         ) -> dict[str, str]:
    """delta-rs options for Google Cloud Storage or Azure Blob from the pack's per-store entry
    (``storage.gcs_endpoint_options`` / ``azure_endpoint_options``): only the endpoint.
    object_store reads the credentials from the environment itself
    (``GOOGLE_APPLICATION_CREDENTIALS`` / ``GOOGLE_SERVICE_ACCOUNT`` or the metadata server;
    ``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY``, ``AZURE_STORAGE_SAS_KEY``,
    ``AZURE_CLIENT_ID`` / ``AZURE_CLIENT_SECRET`` / ``AZURE_TENANT_ID`` or a managed identity).
    Both stores have conditional puts, so commits need no lock service."""
    given = dict(storage_options or {})
    gcs = scheme in ("gs", "gcs")
    entry = dict(given.get("gcs" if gcs else "azure") or {})
    endpoint = entry.get("endpoint")
    out: dict[str, str] = {}
    if endpoint:
        out["google_base_url" if gcs else "azure_storage_endpoint"] = str(endpoint).rstrip("/")
        if str(endpoint).lower().startswith("http://"):
            out["allow_http"] = "true"
            if gcs:  # an emulator: object_store's own switch for one, no token requested
                out["google_service_account_key"] = json.dumps(
                    {"gcs_base_url": out["google_base_url"], "disable_oauth": True,
                     "client_email": "", "private_key": "", "private_key_id": ""})
    prefix = "google_" if gcs else "azure_"
    out.update({k: str(v) for k, v in given.items() if k.lower().startswith(prefix)})
    return out


def check_delta_writes(url: str, what: str, storage_options: Mapping[str, Any] | None) -> None:
    """On ``gs://``: delta-rs can write a table under ``url`` (a one-row probe table, then
    removed). delta-rs (Rust ``object_store``) writes every object and commits every log
    entry through the XML API (``PUT /bucket/object``, the commit with
    ``x-goog-if-generation-match: 0``); gcsfs, which the start checks use, writes through
    the JSON API. A store or emulator without the XML API (fake-gcs-server) is refused here,
    before a batch runs. Other URLs: nothing to do.

    Parameters
    ----------
    url
        The Delta output's location.
    what
        How the error names the location (e.g. ``"fenceddelta output location"``).
    storage_options
        The pack's storage options for ``url``.

    Raises
    ------
    LocationError
        The store, the URL and what to use instead, first in the message.

    Runs on
    -------
    driver"""
    import uuid

    if url.split("://", 1)[0].lower() not in ("gs", "gcs"):
        return
    import contextlib

    import pyarrow as pa
    from deltalake import write_deltalake

    from orderedstream.core.errors import LocationError
    from orderedstream.core.storage import url_to_fs

    probe = f"{url.rstrip('/')}/_orderedstream-delta-probe-{uuid.uuid4().hex[:12]}"
    options = delta_storage_options(url, storage_options)
    endpoint = (dict(storage_options or {}).get("gcs") or {}).get("endpoint")
    try:
        write_deltalake(probe, pa.table({"probe": [1]}), storage_options=options)
    except Exception as exc:  # noqa: BLE001 - reported with the URL
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        text = text[text.find("Server returned"):] if "Server returned" in text else text
        text = text[:300]
        raise LocationError(
            f"{what} location {url!r}: Google Cloud Storage at "
            f"{endpoint or 'its default endpoint'} refused delta-rs's write ({text}). delta-rs "
            "writes through the XML API (PUT /bucket/object with x-goog-if-generation-match), "
            "which fake-gcs-server does not serve; use Google Cloud Storage itself, or "
            "fenced Parquet output (--output-format parquet, format('fencedparquet')) on "
            "this endpoint") from exc
    finally:
        with contextlib.suppress(Exception):
            fs, root = url_to_fs(probe, storage_options)
            fs.rm(root, recursive=True)


__all__ = ["add_action", "check_delta_writes", "delta_storage_options", "is_s3", "log_path",
           "partition_values"]
