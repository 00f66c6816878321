"""Conditional writes on any fsspec filesystem: the fencing primitives of every commit.

- ``create_exclusive``: create an object only if absent (S3 ``If-None-Match: *``; local
  write-then-``link``, which fails if the name exists). A create that s3fs retried after it
  had in fact succeeded comes back as "already exists": the content is read back and
  compared, so the writer is told the truth.
- ``read_versioned`` / ``replace_if_unchanged``: compare-and-swap (S3 ``If-Match: <etag>``;
  locally a lock file plus a content hash as the version tag).

Google Cloud Storage (gcsfs) creates with ``ifGenerationMatch=0`` and swaps with
``ifGenerationMatch=<generation>``; Azure Blob Storage (adlfs) creates with
``If-None-Match: *`` and swaps with ``If-Match: <etag>``: docs/storage.md.

Filesystems that can do neither refuse with a clear error rather than fence by hope.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

from orderedstream.core import objectstore
from orderedstream.core.azureauth import azure_endpoint_fs_options
from orderedstream.core.errors import InvariantError, UnsupportedStorageError

_RETRYABLE_CODES = {"ConditionalRequestConflict", "OperationAborted", "SlowDown",
                    "ServiceUnavailable", "InternalError", "RequestTimeout"}


def s3_endpoint_options(endpoint: str | None = None, *,
                        region: str | None = None) -> dict[str, Any]:
    """s3fs options for an S3-compatible endpoint (path-style addressing, bounded retries).

    Carries no credentials: s3fs (botocore) takes them from the standard chain, i.e.
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``
    and the shared credentials file, or an instance/container role. ``endpoint=None`` is AWS
    itself. The region defaults to ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else us-east-1.
    """
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
    """The lower-case scheme of ``url`` ("file" for a plain path)."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def gcs_endpoint_options(endpoint: str | None = None) -> dict[str, Any]:
    """The pack's options for ``gs://`` URLs: the endpoint of an emulator or a private
    endpoint (None: Google Cloud Storage itself). Carries no credentials: gcsfs takes them
    from ``GOOGLE_APPLICATION_CREDENTIALS`` or the application default credentials; an
    ``http://`` endpoint (an emulator) is reached without any."""
    return {"gcs": {"endpoint": endpoint}} if endpoint else {}


def azure_endpoint_options(endpoint: str | None = None) -> dict[str, Any]:
    """The pack's options for ``az://`` / ``abfs://`` URLs: the blob endpoint of an emulator
    or a private endpoint (``http://127.0.0.1:10000/devstoreaccount1`` for Azurite; None: the
    account's public endpoint). Carries no credentials: they come from the standard
    environment variables (``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY`` or
    ``AZURE_STORAGE_SAS_TOKEN``, a service principal's ``AZURE_CLIENT_ID`` /
    ``AZURE_CLIENT_SECRET`` / ``AZURE_TENANT_ID``, else a managed identity)."""
    return {"azure": {"endpoint": endpoint}} if endpoint else {}


def endpoint_options(*, s3: str | None = None, gcs: str | None = None,
                     azure: str | None = None) -> dict[str, Any]:
    """The pack's ``storage_options`` for the given endpoints (each None: that store's public
    service): ``s3_endpoint_options`` plus the ``gcs`` / ``azure`` entries. No credentials."""
    return {**(s3_endpoint_options(s3) if s3 else {}), **gcs_endpoint_options(gcs),
            **azure_endpoint_options(azure)}


def fs_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fsspec keyword arguments for ``url``'s filesystem from the pack's
    ``storage_options``: none for a local URL; the ``"gcs"`` entry as gcsfs's for ``gs://``,
    the ``"azure"`` entry as adlfs's for ``az://`` / ``abfs://``; the rest (s3fs's) for any
    other URL. Credentials are read from the environment here, in the process that opens the
    filesystem, and never stored in ``storage_options``."""
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
    """``storage_options`` for a filesystem instance of one's own. fsspec otherwise shares one
    instance per options in a process, listing cache included, whose updates are not
    thread-safe: a driver thread beside the batches' (the state cleanup) uses these."""
    return {**(storage_options or {}), "skip_instance_cache": True}


def _protocols(fs: Any) -> set[str]:
    proto = fs.protocol
    return set(proto) if isinstance(proto, (tuple, list)) else {proto}


def is_s3(fs: Any) -> bool:
    return bool(_protocols(fs) & {"s3", "s3a"})


def is_gcs(fs: Any) -> bool:
    return bool(_protocols(fs) & set(GCS_SCHEMES))


def is_azure(fs: Any) -> bool:
    return bool(_protocols(fs) & set(AZURE_SCHEMES))


def is_local(fs: Any) -> bool:
    return bool(_protocols(fs) & {"file", "local"})


def is_local_url(url: str) -> bool:
    """A local path or ``file://`` URL (no storage options apply to it)."""
    return "://" not in url or url.startswith("file://")


def options_for(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The storage options that apply to ``url``: none for a local one (a job's local output
    beside S3 state takes the S3 options only where they belong). Still the pack's form:
    ``fs_options`` gives a filesystem's keyword arguments."""
    return {} if is_local_url(url) else dict(storage_options or {})


def read_object(fs: Any, path: str) -> bytes:
    """The whole content of a small object (a log entry, a manifest); FileNotFoundError when
    absent. On S3 one GET: s3fs's ``cat_file`` otherwise asks for the size first (a HEAD, and
    a LIST when the key is missing) to decide on a multipart download. Through obstore where
    it serves the filesystem (``objectstore``: 0.2 ms of CPU instead of about 1 ms, and a worker
    whose filesystem is lazy does not import s3fs for it)."""
    if is_s3(fs):
        content = objectstore.get(fs, path)
        return bytes(fs.cat_file(path, max_concurrency=1)) if content is None else content
    return bytes(fs.cat_file(path))


def _s3_error_code(exc: BaseException) -> str | None:
    """The S3 error code behind an s3fs exception (s3fs wraps botocore's ClientError)."""
    for candidate in (exc, exc.__cause__, exc.__context__):
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code"))
    return None


def _is_precondition_failed(exc: BaseException) -> bool:
    return _s3_error_code(exc) in {"PreconditionFailed", "412"} or (
        isinstance(exc, OSError) and "pre-conditions you specified did not hold" in str(exc))


def create_exclusive(fs: Any, path: str, data: bytes, attempts: int = 5) -> bool:
    """Create ``path`` with ``data`` only if it does not exist.

    Returns True when this call's content is what the object holds now (created here, or an
    earlier retry of this same call created it), False when another writer's content is there.
    ``data`` should carry something unique to the writer (a token) so the two are told apart.
    """
    if is_local(fs):
        # Write a hidden temp file, then link it into place: link fails if the name exists,
        # and a reader never sees a partly written object.
        local = fs._strip_protocol(path)
        directory, name = os.path.split(local)
        os.makedirs(directory or ".", exist_ok=True)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, local)
            return True
        except FileExistsError:
            return _same_content(fs, path, data)
        finally:
            os.unlink(tmp)
    if is_gcs(fs) or is_azure(fs):
        return _cloud_create(fs, path, data, attempts)
    if not is_s3(fs):
        raise UnsupportedStorageError(
            f"{type(fs).__name__} ({path}) offers no atomic create-if-absent; the commit "
            "protocol needs S3, Google Cloud Storage or Azure Blob conditional writes, or a "
            "local filesystem")
    created = objectstore.put(fs, path, data, create=True)  # obstore: no Python per request
    if created is not None:
        return created or _same_content(fs, path, data)
    for attempt in range(attempts):
        try:
            fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return _same_content(fs, path, data)
        except OSError as exc:
            if _is_precondition_failed(exc):
                return _same_content(fs, path, data)
            if _s3_error_code(exc) in _RETRYABLE_CODES and attempt + 1 < attempts:
                time.sleep(0.1 * 2**attempt)
                continue
            raise
    raise InvariantError(f"create_exclusive({path}): {attempts} attempts ended without an "
                         "answer (attempts must be >= 1)")


def _same_content(fs: Any, path: str, data: bytes) -> bool:
    fs.invalidate_cache(path)
    return bool(read_object(fs, path) == data)


def read_versioned(fs: Any, path: str) -> tuple[bytes, str] | None:
    """``(content, version_tag)`` of ``path``, or None when absent. The tag feeds CAS."""
    fs.invalidate_cache(path)
    if is_s3(fs):
        try:
            info = fs.info(path, refresh=True)
            data = fs.cat_file(path)
        except FileNotFoundError:
            return None
        # Re-read the tag after the content: a swap in between makes the CAS fail, never lie.
        return data, str(info.get("ETag", "")).strip('"') + ":" + hashlib.sha256(data).hexdigest()
    if is_gcs(fs) or is_azure(fs):
        try:
            info = fs.info(path, refresh=True) if is_gcs(fs) else fs.info(path)
            data = fs.cat_file(path)
        except FileNotFoundError:
            return None
        # the version the content was read at: a swap in between makes the CAS fail
        tag = info.get("generation") if is_gcs(fs) else info.get("etag")
        return data, f"{str(tag).strip(chr(34))}:{hashlib.sha256(data).hexdigest()}"
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        return None
    return data, hashlib.sha256(data).hexdigest()


def replace_if_unchanged(fs: Any, path: str, data: bytes, version_tag: str | None) -> bool:
    """Write ``data`` to ``path`` only if it still has ``version_tag`` (None: only if absent).

    Returns False when another writer changed it first.
    """
    if version_tag is None:
        return create_exclusive(fs, path, data)
    if is_s3(fs):
        etag = version_tag.split(":", 1)[0]
        for attempt in range(5):
            try:
                fs.pipe_file(path, data, IfMatch=f'"{etag}"')
                return True
            except OSError as exc:
                if _is_precondition_failed(exc) or isinstance(exc, FileNotFoundError):
                    return _same_content(fs, path, data)
                if _s3_error_code(exc) in _RETRYABLE_CODES and attempt < 4:
                    time.sleep(0.1 * 2**attempt)
                    continue
                raise
        return False
    if is_gcs(fs) or is_azure(fs):
        return _cloud_swap(fs, path, data, version_tag.split(":", 1)[0])
    if not is_local(fs):
        raise UnsupportedStorageError(
            f"{type(fs).__name__} ({path}) offers no compare-and-swap; the commit protocol "
            "needs S3, Google Cloud Storage or Azure Blob conditional writes, or a local "
            "filesystem")
    local = fs._strip_protocol(path)
    with _file_lock(local + ".lock"):
        current = read_versioned(fs, path)
        if current is None or current[1] != version_tag:
            return False
        tmp = f"{local}.{os.getpid()}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, local)
        return True


def _is_conflict(exc: BaseException) -> bool:
    """A refused precondition (HTTP 412, Azure's 409 BlobAlreadyExists) behind ``exc``."""
    for candidate in (exc, exc.__cause__, exc.__context__):
        if candidate is None:
            continue
        if isinstance(candidate, FileExistsError):
            return True
        code = getattr(candidate, "code", None) or getattr(candidate, "status_code", None)
        if code in (412, 409, "412", "409") or type(candidate).__name__ in (
                "ResourceModifiedError", "ResourceExistsError"):
            return True
        if "412" in str(candidate)[:200] and "recondition" in str(candidate):
            return True
    return False


def _cloud_create(fs: Any, path: str, data: bytes, attempts: int) -> bool:
    """GCS ``ifGenerationMatch=0`` / Azure ``If-None-Match: *`` create, through the
    filesystem's own ``mode="create"`` (gcsfs, adlfs)."""
    for attempt in range(attempts):
        try:
            fs.pipe_file(path, data, mode="create")
            _invalidate_listing(fs, path)
            return True
        except Exception as exc:  # noqa: BLE001 - each library's conflict error
            if _is_conflict(exc):
                return _same_content(fs, path, data)
            if attempt + 1 < attempts and _is_transient(exc):
                time.sleep(0.1 * 2**attempt)
                continue
            raise
    raise InvariantError(f"create_exclusive({path}): {attempts} attempts ended without an "
                         "answer (attempts must be >= 1)")


def _cloud_swap(fs: Any, path: str, data: bytes, tag: str) -> bool:
    """Replace ``path`` only at version ``tag``: a GCS generation (``ifGenerationMatch``) or
    an Azure etag (``If-Match``). False when another writer changed it first."""
    try:
        if is_gcs(fs):
            _gcs_put(fs, path, data, if_generation_match=tag)
        else:
            from azure.core import MatchConditions

            fs.pipe_file(path, data, overwrite=True, etag=f'"{tag}"',
                         match_condition=MatchConditions.IfNotModified)
    except FileNotFoundError:
        return False
    except Exception as exc:  # noqa: BLE001 - each library's conflict error
        if _is_conflict(exc):
            return _same_content(fs, path, data)
        raise
    _invalidate_listing(fs, path)
    return True


def _invalidate_listing(fs: Any, path: str) -> None:
    """Drop the cached listings of ``path`` and its folder. adlfs's own write invalidates a
    key without the container (so a listing of the folder stayed stale), gcsfs's the folder."""
    stripped = fs._strip_protocol(path).rstrip("/")
    fs.invalidate_cache(stripped)
    fs.invalidate_cache(stripped.rsplit("/", 1)[0])


def _gcs_put(fs: Any, path: str, data: bytes, *, if_generation_match: str) -> None:
    """One JSON-API multipart upload with ``ifGenerationMatch``, as gcsfs's own
    ``simple_upload`` builds it (the GCS emulator checks the precondition on this kind of
    upload, not on ``uploadType=media``)."""
    import json
    from urllib.parse import quote

    from fsspec.asyn import sync

    bucket, key, _ = fs.split_path(path)
    body = (b'--==0==\nContent-Type: application/json; charset=UTF-8\n\n'
            + json.dumps({"name": key}).encode()
            + b"\n--==0==\nContent-Type: application/octet-stream\n\n" + data
            + b"\n--==0==--")
    sync(fs.loop, fs._call, "POST", f"{fs._location}/upload/storage/v1/b/{quote(bucket)}/o",
         uploadType="multipart", ifGenerationMatch=str(if_generation_match),
         headers={"Content-Type": 'multipart/related; boundary="==0=="'}, data=body,
         json_out=True)


def _is_transient(exc: BaseException) -> bool:
    code = getattr(exc, "code", None) or getattr(exc, "status_code", None)
    return code in (429, 500, 502, 503, 504) or isinstance(exc, (TimeoutError, ConnectionError))


@contextlib.contextmanager
def _file_lock(path: str) -> Any:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
