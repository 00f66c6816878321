"""Conditional writes on any fsspec filesystem: the fencing primitives of every commit.

``create_exclusive`` creates an object only if absent; ``read_versioned`` and
``replace_if_unchanged`` compare and swap. Each store's conditions: docs/storage.md. Other
filesystems are refused, never fenced by hope. The storage options per URL live in
``orderedstream.core.storeoptions`` and are re-exported here. Everything here runs where it
is called, on the driver or an executor.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
import uuid
from typing import Any

from orderedstream.core import objectstore
from orderedstream.core.errors import InvariantError, UnsupportedStorageError
from orderedstream.core.storeoptions import (
    AZURE_SCHEMES,
    GCS_SCHEMES,
    azure_endpoint_options,
    endpoint_options,
    fs_options,
    gcs_endpoint_options,
    is_local_url,
    options_for,
    private_options,
    s3_endpoint_options,
    url_scheme,
    url_to_fs,
)

__all__ = ["AZURE_SCHEMES", "GCS_SCHEMES", "azure_endpoint_options", "create_exclusive",
           "endpoint_options", "fs_options", "gcs_endpoint_options", "is_azure", "is_gcs",
           "is_local", "is_local_url", "is_s3", "options_for", "private_options",
           "read_object", "read_versioned", "replace_if_unchanged", "s3_endpoint_options",
           "url_scheme", "url_to_fs"]

_RETRYABLE_CODES = {"ConditionalRequestConflict", "OperationAborted", "SlowDown",
                    "ServiceUnavailable", "InternalError", "RequestTimeout"}


def _protocols(fs: Any) -> set[str]:
    proto = fs.protocol
    return set(proto) if isinstance(proto, (tuple, list)) else {proto}


def is_s3(fs: Any) -> bool:
    """Whether ``fs`` is S3 (``s3``, ``s3a``) by its protocol.

    Parameters
    ----------
    fs
        An fsspec filesystem."""
    return bool(_protocols(fs) & {"s3", "s3a"})


def is_gcs(fs: Any) -> bool:
    """Whether ``fs`` is Google Cloud Storage (``gs``, ``gcs``) by its protocol.

    Parameters
    ----------
    fs
        An fsspec filesystem."""
    return bool(_protocols(fs) & set(GCS_SCHEMES))


def is_azure(fs: Any) -> bool:
    """Whether ``fs`` is Azure Blob (``az``, ``abfs``, ``abfss``, ``adl``) by its protocol.

    Parameters
    ----------
    fs
        An fsspec filesystem."""
    return bool(_protocols(fs) & set(AZURE_SCHEMES))


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is a local filesystem (``file``, ``local``) by its protocol.

    Parameters
    ----------
    fs
        An fsspec filesystem."""
    return bool(_protocols(fs) & {"file", "local"})


def read_object(fs: Any, path: str) -> bytes:
    """The whole content of a small object (a log entry, a manifest).

    On S3 one GET: s3fs's ``cat_file`` otherwise asks for the size first (a HEAD, and a LIST
    when the key is missing). Through obstore where it serves the filesystem: less CPU per
    request, and a lazy filesystem does not import s3fs for it
    (docs/decisions/0013-obstore-for-small-puts.md).

    Parameters
    ----------
    fs, path
        The fsspec filesystem and the object's path in it.

    Raises
    ------
    FileNotFoundError
        The object does not exist.
    OSError
        The store refused or failed the read."""
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

    A create that the client retried after it had in fact succeeded comes back as "already
    exists": the content is then read back and compared, so the writer is told the truth.

    Parameters
    ----------
    fs, path
        The fsspec filesystem (S3, GCS, Azure Blob or local) and the object's path in it.
    data
        The content; it should carry something unique to the writer (a token).
    attempts
        Tries on a transient error (GCS, Azure, S3 through s3fs).

    Returns
    -------
    bool
        True when this call's content is what the object holds now, False when another
        writer's content is there.

    Raises
    ------
    UnsupportedStorageError
        ``fs`` offers no atomic create-if-absent.
    InvariantError
        ``attempts`` is below 1.
    OSError
        The store failed the request, after the retries."""
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
    """The content of ``path`` and a version tag for ``replace_if_unchanged``.

    Parameters
    ----------
    fs, path
        The fsspec filesystem and the object's path in it.

    Returns
    -------
    tuple or None
        ``(content, version_tag)`` (the store's etag or generation and a content hash;
        locally the hash alone), None when absent."""
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
    """Write ``data`` to ``path`` only if it still has ``version_tag`` (compare and swap).

    Parameters
    ----------
    fs, path
        The fsspec filesystem (S3, GCS, Azure Blob or local) and the object's path in it.
    data
        The new content.
    version_tag
        The tag ``read_versioned`` gave; None: write only if absent (``create_exclusive``).

    Returns
    -------
    bool
        True when written (or this content is already there), False when another writer
        changed the object first.

    Raises
    ------
    UnsupportedStorageError
        ``fs`` offers no compare-and-swap.
    OSError
        The store failed the request, after the retries."""
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
