"""S3 requests of the per-batch hot path through obstore (Rust ``object_store``), when the
fsspec S3 filesystem's settings map onto it exactly (``settings_for``); otherwise the caller
keeps using s3fs (docs/decisions/0013-obstore-for-small-puts.md). Errors are ``OSError``
naming the ``s3://`` URL, obstore's as the cause; a write invalidates s3fs's listing cache of
its path. Everything here runs where it is called, on the driver or an executor.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from orderedstream.core import threads

_log = logging.getLogger(__name__)

_UNDERSTOOD = {"key", "secret", "token", "anon", "client_kwargs", "config_kwargs",
               "endpoint_url", "use_listings_cache", "listings_expiry_time", "max_paths",
               "skip_instance_cache", "default_block_size", "default_fill_cache",
               "default_cache_type", "asynchronous", "loop"}
_CLIENT_UNDERSTOOD = {"endpoint_url", "region_name", "verify"}
_CONFIG_UNDERSTOOD = {"s3", "retries", "connect_timeout", "read_timeout"}

_stores: dict[tuple[Any, ...], Any] = {}
_missing_logged = False


def _settings(fs: Any) -> dict[str, Any] | None:
    """obstore ``S3Store`` keyword arguments equivalent to ``fs``'s, or None."""
    if (type(fs).__module__.split(".")[0] != "s3fs"
            and not getattr(type(fs), "native_s3_writes", False)):  # core.lazys3
        return None
    if getattr(fs, "version_aware", False):
        return None
    return settings_for(getattr(fs, "storage_options", {}) or {})


def settings_for(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """obstore ``S3Store`` keyword arguments equivalent to an s3fs filesystem's ``options``.

    Understood: ``key``/``secret`` (and ``token``) or ``anon``, else the environment's
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``; an endpoint or a region; addressing;
    timeouts and retries. Profiles, instance roles, a CA bundle, extra arguments keep s3fs.

    Parameters
    ----------
    options
        The ``storage_options`` of an ``s3fs.S3FileSystem``.

    Returns
    -------
    dict or None
        None when obstore would not do exactly what s3fs does, or with
        ``ORDEREDSTREAM_NATIVE_S3=0``."""
    if os.environ.get("ORDEREDSTREAM_NATIVE_S3", "1") == "0":
        return None
    client = dict(options.get("client_kwargs") or {})
    config = dict(options.get("config_kwargs") or {})
    if (set(options) - _UNDERSTOOD or set(client) - _CLIENT_UNDERSTOOD
            or set(config) - _CONFIG_UNDERSTOOD
            or set(config.get("s3") or {}) - {"addressing_style"}
            or client.get("verify") not in (None, True, False)):  # a CA bundle's path
        return None
    endpoint = options.get("endpoint_url") or client.get("endpoint_url")
    region = client.get("region_name")
    if not region:
        if not endpoint:
            return None  # AWS itself: s3fs finds the bucket's region, obstore would not
        region = "us-east-1"
    out: dict[str, Any] = {"region": region}
    if options.get("anon"):
        out["skip_signature"] = True
    elif options.get("key") and options.get("secret"):
        out.update(access_key_id=options["key"], secret_access_key=options["secret"])
        if options.get("token"):
            out["session_token"] = options["token"]
        elif os.environ.get("AWS_SESSION_TOKEN"):
            return None  # obstore would add the environment's token to explicit keys
    elif (not options.get("key") and not options.get("secret")
          and os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
        out.update(access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                   secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])
        if os.environ.get("AWS_SESSION_TOKEN"):
            out["session_token"] = os.environ["AWS_SESSION_TOKEN"]
    else:
        return None  # a profile, an instance role ...: botocore's chain, not obstore's
    if endpoint:
        out["endpoint"] = str(endpoint).rstrip("/")
    style = (config.get("s3") or {}).get("addressing_style")
    out["virtual_hosted_style_request"] = style == "virtual"
    client_options: dict[str, Any] = {
        "connect_timeout": f"{float(config.get('connect_timeout', 5)):g}s",
        "read_timeout": f"{float(config.get('read_timeout', 60)):g}s",
        "timeout": "300s",  # a whole request, a large SST included
    }
    if endpoint and str(endpoint).startswith("http://"):
        client_options["allow_http"] = True
    if client.get("verify") is False:
        client_options["allow_invalid_certificates"] = True
    # one request fewer than botocore makes (total_max_attempts n: n - 2 retries)
    retries = max(0, total_attempts(config.get("retries")) - 2)
    out["client_options"] = client_options
    out["retry_config"] = {"max_retries": retries,
                           "retry_timeout": timedelta(seconds=60)}
    return out


def total_attempts(retries: Mapping[str, Any] | None) -> int:
    """An s3fs ``config_kwargs["retries"]`` as botocore's ``total_max_attempts``.

    botocore rewrites ``max_attempts`` (n retries) as ``total_max_attempts`` (n + 1) in the
    options' own dict when s3fs builds its client; both must give the same obstore store.

    Parameters
    ----------
    retries
        The retries mapping; None or neither key: 6, this module's default."""
    retries = retries or {}
    if retries.get("total_max_attempts") is not None:
        return int(retries["total_max_attempts"])
    return int(retries.get("max_attempts", 5)) + 1


def _store(fs: Any, bucket: str) -> Any | None:
    settings = _settings(fs)
    if settings is None:
        return None
    key = (os.getpid(), bucket, repr(sorted(settings.items())))
    store = _stores.get(key)
    if store is None:
        try:
            from obstore.store import S3Store
        except ImportError:
            global _missing_logged
            if not _missing_logged:
                _missing_logged = True
                _log.info("obstore is not installed: S3 puts go through s3fs")
            return None
        store = _stores[key] = S3Store(bucket, **settings)
    return store


def _split(fs: Any, path: str) -> tuple[str, str]:
    bucket, _, key = fs._strip_protocol(path).partition("/")
    return bucket, key


def _stores_for(fs: Any, buckets: Iterable[str]) -> dict[str, Any] | None:
    """bucket -> obstore store for each of ``buckets``; None when one is not served."""
    stores: dict[str, Any] = {}
    for bucket in buckets:
        if bucket not in stores:
            store = _store(fs, bucket)
            if store is None:
                return None
            stores[bucket] = store
    return stores


def native(fs: Any, path: str) -> bool:
    """Whether writes to ``path`` on ``fs`` take the obstore path.

    Parameters
    ----------
    fs, path
        The fsspec filesystem and a path in it."""
    return _store(fs, _split(fs, path)[0]) is not None


def put(fs: Any, path: str, data: bytes | str, *, create: bool = False) -> bool | None:
    """Put ``data`` at ``path`` of ``fs`` through obstore.

    Parameters
    ----------
    fs, path
        The fsspec S3 filesystem and the object's path in it.
    data
        The content, or a local file's path as str (a large file goes up in parts).
    create
        Only if the object does not exist (S3 ``If-None-Match: *``).

    Returns
    -------
    bool or None
        True when written, False when ``create`` and the object exists, None when the
        obstore path is not available (the caller writes with ``fs``).

    Raises
    ------
    OSError
        The put failed."""
    bucket, key = _split(fs, path)
    store = _store(fs, bucket)
    if store is None:
        return None
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    body: Any = data
    if isinstance(data, str):  # a local file: big SSTs go up in parts
        from pathlib import Path

        body = Path(data)
    try:
        obstore.put(store, key, body, mode="create" if create else "overwrite",
                    use_multipart=False if create or not isinstance(data, str) else None)
    except (AlreadyExistsError, PreconditionError):
        if not create:
            raise
        return False
    except Exception as exc:  # noqa: BLE001 - obstore's errors, re-raised as the pack's OSError
        raise OSError(f"S3 put of s3://{bucket}/{key} failed: {exc}") from exc
    finally:
        fs.invalidate_cache(f"{bucket}/{key}")
    return True


def _get(store: Any, bucket: str, key: str) -> bytes:
    """One GET; ``FileNotFoundError`` when absent, else an ``OSError`` naming the URL."""
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        return bytes(obstore.get(store, key).bytes())
    except (FileNotFoundError, NotFoundError) as exc:  # obstore raises the former
        raise FileNotFoundError(f"s3://{bucket}/{key} does not exist") from exc
    except Exception as exc:  # noqa: BLE001 - obstore's errors, re-raised as the pack's OSError
        raise OSError(f"S3 get of s3://{bucket}/{key} failed: {exc}") from exc


def get(fs: Any, path: str) -> bytes | None:
    """The content of the small object ``path`` of ``fs``, one GET through obstore; None when
    the obstore path is not available (the caller reads with ``fs``).

    Parameters
    ----------
    fs, path
        The fsspec S3 filesystem and the object's path in it.

    Raises
    ------
    FileNotFoundError
        The object does not exist.
    OSError
        The GET failed."""
    bucket, key = _split(fs, path)
    store = _store(fs, bucket)
    return None if store is None else _get(store, bucket, key)


def get_many(fs: Any, paths: Sequence[str], *,
             workers: int = 8) -> dict[str, bytes | OSError] | None:
    """The contents of the small objects ``paths`` of ``fs``, read through obstore by
    ``workers`` threads: path -> bytes, or the error ``get`` would raise. None when the
    obstore path is not available for every path (the caller reads with ``fs``).

    Why: the driver's state retention reads the manifests of every batch since its previous
    run inside a batch; one at a time they added up (decision record 0013).

    Parameters
    ----------
    fs, paths
        The fsspec S3 filesystem and the objects' paths in it.
    workers
        Reader threads.

    Runs on
    -------
    driver"""
    if not paths:
        return {}
    located = {path: _split(fs, path) for path in paths}
    stores = _stores_for(fs, (bucket for bucket, _ in located.values()))
    if stores is None:
        return None

    def read(path: str) -> bytes | OSError:
        bucket, key = located[path]
        try:
            return _get(stores[bucket], bucket, key)
        except OSError as exc:
            return exc

    with threads.lend("objectstore-get", workers) as pool:
        return dict(zip(paths, pool.map(read, paths), strict=True))


def find(fs: Any, path: str) -> list[str] | None:
    """Every object under ``path`` of ``fs``, recursive, listed through obstore.

    Parameters
    ----------
    fs, path
        The fsspec S3 filesystem and a prefix in it (``a/b`` lists ``a/b/x``, not ``a/bc``).

    Returns
    -------
    list of str or None
        ``bucket/key`` names as s3fs's ``find`` gives them ([] when none); None when the
        obstore path is not available (the caller lists with ``fs``).

    Raises
    ------
    OSError
        The listing failed."""
    bucket, key = _split(fs, path)
    store = _store(fs, bucket)
    if store is None:
        return None
    import obstore

    prefix = key.strip("/") or None
    found: list[str] = []
    try:
        for chunk in obstore.list(store, prefix, chunk_size=1000):
            found.extend(f"{bucket}/{meta['path']}" for meta in chunk)
    except Exception as exc:  # noqa: BLE001 - obstore's errors, re-raised as the pack's OSError
        raise OSError(f"S3 listing of s3://{bucket}/{prefix or ''} failed: {exc}") from exc
    return found


def exists_under(fs: Any, path: str) -> bool | None:
    """Whether any object lies under ``path`` of ``fs`` (path segments, as ``find``), from
    the first page of one obstore listing; None when the obstore path is not available.

    Parameters
    ----------
    fs, path
        The fsspec S3 filesystem and a prefix in it.

    Raises
    ------
    OSError
        The listing failed."""
    bucket, key = _split(fs, path)
    store = _store(fs, bucket)
    if store is None:
        return None
    import obstore

    prefix = key.strip("/") or None
    try:
        for chunk in obstore.list(store, prefix, chunk_size=1):
            if len(chunk):
                return True
    except Exception as exc:  # noqa: BLE001 - obstore's errors, re-raised as the pack's OSError
        raise OSError(f"S3 listing of s3://{bucket}/{prefix or ''} failed: {exc}") from exc
    return False


def delete_many(fs: Any, paths: Sequence[str]) -> bool:
    """Delete ``paths`` of ``fs`` through obstore (S3 ``DeleteObjects``); an absent object
    counts as deleted, as with s3fs. The driver's state retention deletes this way, so its
    first cleanup does not import s3fs inside a batch (decision record 0013).

    Parameters
    ----------
    fs, paths
        The fsspec S3 filesystem and the objects' paths in it.

    Returns
    -------
    bool
        True when deleted; False, nothing deleted, when the obstore path does not serve
        every path (the caller deletes with ``fs``).

    Raises
    ------
    OSError
        A request failed, naming the bucket; others may have deleted their keys, so
        callers must be idempotent (retention is)."""
    located = [_split(fs, path) for path in paths]
    stores = _stores_for(fs, (bucket for bucket, _ in located))
    if stores is None:
        return False
    if not located:
        return True
    import obstore

    for bucket, store in stores.items():
        keys = [key for b, key in located if b == bucket]
        try:
            obstore.delete(store, keys)
        except Exception as exc:  # noqa: BLE001 - obstore's errors, as the pack's OSError
            raise OSError(f"S3 delete of {len(keys)} object(s) from s3://{bucket}/ (among them "
                          f"s3://{bucket}/{keys[0]}) failed, some may be deleted: {exc}") from exc
        finally:
            for key in keys:
                fs.invalidate_cache(f"{bucket}/{key}")
    return True


class SmallObjectFile:
    """Write handle for ``orderedstream.sinks.upload.StagedFile``: a file of one part goes up
    as one obstore put at ``close``; from its second part on it is an s3fs multipart upload
    opened with ``open_large`` (parts uploaded as they come, aborted by ``discard``)."""

    def __init__(self, fs: Any, path: str, open_large: Any) -> None:
        self._fs = fs
        self._path = path
        self._open_large = open_large
        self._first: bytes | None = None
        self._large: Any = None
        self.closed = False

    def write(self, data: Any) -> int:
        """Buffer the first part; from the second on, write through the multipart upload.

        Parameters
        ----------
        data
            One part's bytes."""
        if self._large is None and self._first is None:
            self._first = bytes(data)
            return len(data)
        if self._large is None:
            self._large = self._open_large()
            self._large.write(self._first)
            self._first = None
        return int(self._large.write(data))

    def close(self) -> None:
        """Finish: the one part as one put, or the multipart upload completed.

        Raises
        ------
        OSError
            The put or the upload failed, or the obstore path is no longer available."""
        if self.closed:
            return
        if self._large is not None:
            self._large.close()
        elif put(self._fs, self._path, self._first or b"") is None:
            raise OSError(f"S3 put of {self._path}: the obstore path is no longer available")
        self.closed = True

    def discard(self) -> None:
        """Failure path: nothing was put yet, or the multipart upload is aborted."""
        self._first = None
        if self._large is not None:
            self._large.discard()
            self._large.closed = True  # or its __del__ would try to finish the upload
        self.closed = True


__all__ = ["SmallObjectFile", "delete_many", "find", "get", "get_many", "native", "put",
           "total_attempts"]
