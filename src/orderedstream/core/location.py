"""Is a location writable? A probe object written, read back and deleted under a URL.

Used wherever the pack is about to write somewhere for the first time (the main job's
locations before Spark starts, a sink's table before its first commit): a missing bucket,
denied access, an unreachable endpoint or a path under a regular file fails there with
``LocationError`` naming the URL, instead of deep in a task's traceback after records were
processed.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from orderedstream.core import storage
from orderedstream.core.errors import LocationError, OrderedStreamError
from orderedstream.core.storage import fs_options, is_local, is_local_url, is_s3, url_to_fs

_PROBE = "_orderedstream_probe"
_DATA = b"orderedstream location check"


#: How long the reachability check waits for the bucket's HEAD: an endpoint that accepts
#: connections and never answers fails it then, not after s3fs's and botocore's retries of
#: 30 s reads (ten minutes).
HEAD_TIMEOUT_S = 20.0


def open_location(url: str, what: str, storage_options: Mapping[str, Any] | None = None,
                  ) -> tuple[Any, str]:
    """The fsspec filesystem and root path of ``url``, once it is known to be reachable.

    Parameters
    ----------
    url
        The location's URL or local path.
    what
        How the error names the location (e.g. ``"output"``).
    storage_options
        The pack's storage options for ``url``.

    Returns
    -------
    tuple[Any, str]
        The filesystem and the root path inside it.

    Raises
    ------
    LocationError
        fsspec cannot open the URL (unknown protocol, its package missing, a malformed
        endpoint), an S3 endpoint does not answer within ``HEAD_TIMEOUT_S``, or the bucket or
        container does not exist or cannot be checked; the message names ``what`` and the URL.
    OSError
        An S3 connection was refused or credentials are missing (raised as they are, for the
        caller's own words).

    Runs on
    -------
    driver
    """

    options = fs_options(url, storage_options)
    try:
        fs, root = url_to_fs(url, storage_options)
    except Exception as exc:  # noqa: BLE001 - reported with the URL
        raise LocationError(f"{what} location {url!r} cannot be opened: {type(exc).__name__}: "
                            f"{_short(exc)}. Give a local path or an fsspec URL "
                            "(s3://bucket/prefix) with its filesystem package installed") from exc
    if is_s3(fs):
        _check_bucket(fs, url, what, root.split("/", 1)[0], options)
    elif storage.is_gcs(fs) or storage.is_azure(fs):
        _check_container(fs, url, what, root.split("/", 1)[0], storage_options)
    return fs, root


def _store_words(url: str) -> tuple[str, str, str]:
    """(store name, its bucket word, what to check) for a cloud URL's messages."""
    if storage.url_scheme(url) in storage.GCS_SCHEMES:
        return ("Google Cloud Storage", "bucket",
                "GOOGLE_APPLICATION_CREDENTIALS or the application default credentials, and "
                "--gcs-endpoint for an emulator")
    return ("Azure Blob Storage", "container",
            "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or "
            "AZURE_STORAGE_SAS_TOKEN (or a service principal / managed identity), and "
            "--azure-endpoint for an emulator")


def _check_container(fs: Any, url: str, what: str, bucket: str,
                     storage_options: Mapping[str, Any] | None) -> None:
    """The GCS bucket or Azure container of ``url`` exists: ``LocationError`` naming it and
    the endpoint otherwise, or when the store refuses the credentials."""
    store, word, check = _store_words(url)
    entry = dict((storage_options or {}).get(
        "gcs" if word == "bucket" else "azure") or {})
    endpoint = entry.get("endpoint") or f"{store} itself"
    try:
        found = fs.exists(bucket)
    except Exception as exc:  # noqa: BLE001 - reported with the URL
        raise LocationError(f"{what} location {url!r}: {store} at {endpoint} refused or failed "
                            f"the check of {word} {bucket!r} ({type(exc).__name__}: "
                            f"{_short(exc)}). Check {check}") from exc
    if not found:
        raise LocationError(f"{what} location {url!r}: {word} {bucket!r} does not exist on "
                            f"{store} at {endpoint}. Create it, or check the URL and {check}")


def _check_bucket(fs: Any, url: str, what: str, bucket: str, options: dict[str, Any],
                  ) -> None:
    """HEAD the bucket through ``fs``'s own client (building a second one is not free),
    waiting at most ``HEAD_TIMEOUT_S``; a denied HEAD passes (the
    credentials may still read and write objects)."""
    from fsspec.asyn import sync
    from fsspec.exceptions import FSTimeoutError

    endpoint = (options.get("client_kwargs") or {}).get("endpoint_url") or "AWS S3"
    try:
        sync(fs.loop, fs._call_s3, "head_bucket", Bucket=bucket, timeout=HEAD_TIMEOUT_S)
    except FSTimeoutError:
        raise LocationError(f"{what} location {url!r}: the S3 endpoint {endpoint} did not "
                            f"answer within {HEAD_TIMEOUT_S:g} s. Check the endpoint URL and "
                            "that the server is up") from None
    except FileNotFoundError:
        raise LocationError(f"{what} location {url!r}: bucket {bucket!r} does not exist at "
                            f"{endpoint}. Create it, or check the URL and the S3 endpoint"
                            ) from None
    except PermissionError:
        return
    except ValueError as exc:  # botocore: "Invalid endpoint: ..."
        raise LocationError(f"{what} location {url!r}: the S3 endpoint {endpoint!r} cannot be "
                            f"used ({_short(exc)}); give a URL such as https://host:port"
                            ) from exc
    # Connection refused, no credentials: raised as they are, for the caller's own words
    # (the CLI's environment_error, check_location's "not writable").


def check_location(url: str, what: str, storage_options: Mapping[str, Any] | None = None,
                   ) -> None:
    """Write, read back and delete a small probe object under ``url`` (on GCS and Azure also
    check that a second create-if-absent is refused).

    Parameters
    ----------
    url
        The location's URL or local path (a local folder is created).
    what
        How the error names the location (e.g. ``"output"``).
    storage_options
        The pack's storage options for ``url``.

    Raises
    ------
    LocationError
        Any step fails, naming ``what``, the URL, the cause and what to check.

    Runs on
    -------
    driver
    """
    try:
        fs, root = open_location(url, what, storage_options)
    except OrderedStreamError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported with the URL
        raise location_error(exc, url, what, local=False) from exc
    probe = f"{root.rstrip('/')}/{_PROBE}-{uuid.uuid4().hex[:12]}"
    local = is_local(fs)
    try:
        if local:
            fs.makedirs(root, exist_ok=True)
        fs.pipe_file(probe, _DATA)
        if fs.cat_file(probe) != _DATA:
            raise OSError("the probe object read back differs from what was written")
        fs.rm_file(probe)
        if storage.is_gcs(fs) or storage.is_azure(fs):
            _check_conditional_writes(fs, url, what, f"{probe}-conditional")
    except OrderedStreamError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported with the URL
        raise location_error(exc, url, what, local=local) from exc


def _check_conditional_writes(fs: Any, url: str, what: str, probe: str) -> None:
    """The store refuses a second create-if-absent of one object (an emulator or gateway that
    ignores the precondition would let two writers both commit a batch)."""
    try:
        first = storage.create_exclusive(fs, probe, b"first")
        second = storage.create_exclusive(fs, probe, b"second")
    finally:
        with contextlib.suppress(Exception):
            fs.rm_file(probe)
    if not (first and not second):
        store, _, _ = _store_words(url)
        raise LocationError(f"{what} location {url!r}: the {store} endpoint does not honour "
                            "conditional writes (a second create-if-absent of one object "
                            "succeeded), which the commit protocol needs to fence writers. "
                            "Use a store or emulator that honours ifGenerationMatch / "
                            "If-None-Match")


def location_error(exc: BaseException, url: str, what: str, *, local: bool | None = None,
                   ) -> LocationError:
    """Build the ``LocationError`` for an I/O failure ``exc`` met at ``url``: the cause in one
    line, then what to check (for a local path, for S3, for GCS or Azure).

    Parameters
    ----------
    exc
        The I/O failure.
    url
        The location's URL or local path.
    what
        How the message names the location.
    local
        Whether ``url`` is local; None decides from the URL.

    Returns
    -------
    LocationError
        The error to raise (``from exc``).

    Runs on
    -------
    both
    """
    if local is None:
        local = is_local_url(url)
    scheme = storage.url_scheme(url)
    if local:
        hint = ("Check that the folder can be created and written by this user (no regular "
                "file on the path)")
    elif scheme in storage.GCS_SCHEMES + storage.AZURE_SCHEMES:
        store, word, check = _store_words(url)
        hint = f"Check that the {word} exists and {check}"
        return LocationError(f"{what} location {url!r} on {store} is not writable "
                             f"({type(exc).__name__}: {_short(exc)}). {hint}")
    else:
        hint = ("Check that the bucket exists, the credentials (AWS_ACCESS_KEY_ID / "
                "AWS_PROFILE) may write under it, and the S3 endpoint points at the right "
                "server")
    return LocationError(f"{what} location {url!r} is not writable ({type(exc).__name__}: "
                         f"{_short(exc)}). {hint}")


#: Modules of the S3 clients whose exceptions are I/O failures, not all of them OSError.
_IO_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs")


@contextlib.contextmanager
def io_failures_named(url: str, what: str) -> Iterator[None]:
    """Turn I/O failures at ``url`` inside the ``with`` block into :func:`location_error`.

    Parameters
    ----------
    url
        The location the block works on.
    what
        How the message names the location.

    Returns
    -------
    Iterator[None]
        A context manager's generator.

    Raises
    ------
    LocationError
        The block raised an ``OSError`` or an S3 client's error (botocore, aiobotocore, aiohttp,
        s3fs); the pack's own errors and other exceptions pass unchanged.

    Runs on
    -------
    both
    """
    try:
        yield
    except OrderedStreamError:
        raise
    except Exception as exc:
        if isinstance(exc, OSError) or type(exc).__module__.startswith(_IO_MODULES):
            raise location_error(exc, url, what) from exc
        raise


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "(no message)"


__all__ = ["check_location", "io_failures_named", "location_error", "open_location"]
