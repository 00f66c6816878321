"""Conditional writes on any fsspec filesystem: the fencing primitives of every commit.

- ``create_exclusive``: create an object only if absent (S3 ``If-None-Match: *``; local
  write-then-``link``, which fails if the name exists). A create that s3fs retried after it
  had in fact succeeded comes back as "already exists": the content is read back and
  compared, so the writer is told the truth.
- ``read_versioned`` / ``replace_if_unchanged``: compare-and-swap (S3 ``If-Match: <etag>``;
  locally a lock file plus a content hash as the version tag).

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


def is_local(fs: Any) -> bool:
    return bool(_protocols(fs) & {"file", "local"})


def is_local_url(url: str) -> bool:
    """A local path or ``file://`` URL (no storage options apply to it)."""
    return "://" not in url or url.startswith("file://")


def options_for(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The storage options that apply to ``url``: none for a local one (a job's local output
    beside S3 state takes the S3 options only where they belong)."""
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
    if not is_s3(fs):
        raise UnsupportedStorageError(
            f"{type(fs).__name__} ({path}) offers no atomic create-if-absent; the commit "
            "protocol needs S3 conditional writes or a local filesystem")
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
    if not is_local(fs):
        raise UnsupportedStorageError(
            f"{type(fs).__name__} ({path}) offers no compare-and-swap; the commit protocol "
            "needs S3 conditional writes or a local filesystem")
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


@contextlib.contextmanager
def _file_lock(path: str) -> Any:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
