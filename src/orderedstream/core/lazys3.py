"""An S3 filesystem that imports s3fs at its first use beyond obstore's writes.

A Spark worker of the main job puts its output files and state through obstore
(``core.objectstore``) and, once its state's local copy is current, reads nothing from S3, so
it need not pay for importing s3fs and building a botocore client (why:
docs/decisions/0013-obstore-for-small-puts.md). ``url_to_fs`` here returns, for a plain
``s3://`` or ``s3a://`` URL whose options obstore serves exactly, a ``LazyS3FileSystem``:
obstore's puts read its options; anything else (a read, a listing, a multipart upload) creates
the s3fs filesystem fsspec would have returned (the same cached instance) and goes to it.
Other URLs, options obstore does not serve and ``ORDEREDSTREAM_NATIVE_S3=0`` get fsspec's own
filesystem.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any

from orderedstream.core import objectstore

_invalidating = threading.Lock()
"""Serializes this module's invalidations of s3fs listing caches. fsspec shares one s3fs
instance per options between a process's threads, and its ``DirCache.pop`` is a read, then a
delete: two threads popping one listing, one gets ``KeyError``. (The state cleanup's thread
uses instances of its own: ``storage.private_options``.)"""


def _comparable(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` without ``config_kwargs["retries"]``, which botocore rewrites in the
    options' own dict once the client exists (``max_attempts`` n -> ``total_max_attempts``
    n + 1, a missing ``mode`` added). Matching instances that differ only there is harmless:
    an invalidation only drops a listing."""
    config = options.get("config_kwargs")
    if not isinstance(config, Mapping) or "retries" not in config:
        return dict(options)
    return {**options, "config_kwargs": {k: v for k, v in config.items() if k != "retries"}}


def _invalidate(fs: Any, path: str | None) -> None:
    """``fs.invalidate_cache(path)``, again while another thread (outside this module) pops a
    listing between the cache's read and delete: each retry finds one listing fewer."""
    for _ in range(16):
        try:
            fs.invalidate_cache(path)
            return
        except KeyError:
            continue
    fs.invalidate_cache(path)


class LazyS3FileSystem:
    """Stands for ``fsspec.filesystem("s3", **storage_options)`` until something needs it.

    Answers without s3fs only what obstore's write path asks (``protocol``,
    ``storage_options``, ``_strip_protocol``, ``invalidate_cache``); every other attribute is
    the s3fs filesystem's, created then. Pickles as its options."""

    protocol = ("s3", "s3a")
    root_marker = ""
    sep = "/"
    version_aware = False
    native_s3_writes = True  # objectstore: the options are those of an s3fs filesystem

    def __init__(self, storage_options: Mapping[str, Any]) -> None:
        self.storage_options = dict(storage_options)
        self._fs: Any = None

    @property
    def created(self) -> bool:
        """Whether the s3fs filesystem exists (s3fs imported)."""
        return self._fs is not None

    def filesystem(self) -> Any:
        """The s3fs filesystem these options stand for (created and cached at the first call)."""
        if self._fs is None:
            import fsspec

            self._fs = fsspec.filesystem("s3", **self.storage_options)
        return self._fs

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        """s3fs's: the path without ``s3://`` / ``s3a://`` and trailing slashes."""
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for proto in cls.protocol:
            if path.startswith(proto + "://"):
                path = path[len(proto) + 3:]
            elif path.startswith(proto + "::"):
                path = path[len(proto) + 2:]
        return path.rstrip("/") or cls.root_marker

    def invalidate_cache(self, path: str | None = None) -> None:
        """Drop s3fs's cached listing of ``path``, here and in every fsspec s3fs instance of these
        options (a commit log's may hold one), without creating the s3fs filesystem. Before s3fs is
        imported no listing can exist and nothing is done.

        Parameters
        ----------
        path
            The path whose listing to drop; None drops every listing.

        Runs on
        -------
        both
        """
        s3fs = sys.modules.get("s3fs")
        if s3fs is None:
            return
        with _invalidating:
            if self._fs is not None:
                _invalidate(self._fs, path)
            # every fsspec instance of these options (a dict botocore rewrote makes another)
            mine = _comparable(self.storage_options)
            for fs in list(getattr(s3fs.S3FileSystem, "_cache", {}).values()):
                theirs = _comparable(getattr(fs, "storage_options", None) or {})
                if fs is not self._fs and theirs == mine:
                    _invalidate(fs, path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_fs":
            raise AttributeError(name)
        return getattr(self.filesystem(), name)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (LazyS3FileSystem, (self.storage_options,))

    def __repr__(self) -> str:
        return f"LazyS3FileSystem(created={self.created})"


def url_to_fs(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs(url, **storage_options)``, lazy for S3 as the module says.

    Parameters
    ----------
    url
        The location's URL or local path.
    storage_options
        The pack's storage options (see ``orderedstream.core.storage.fs_options``).

    Returns
    -------
    tuple[Any, str]
        The filesystem (a ``LazyS3FileSystem`` for a plain S3 URL whose options obstore serves)
        and the path inside it.

    Raises
    ------
    ValueError
        fsspec cannot open the URL (e.g. an unknown protocol); its package missing is an
        ``ImportError``.

    Runs on
    -------
    both
    """
    from orderedstream.core.storage import fs_options

    options = fs_options(url, storage_options)
    if (url.startswith(("s3://", "s3a://")) and "::" not in url and "?" not in url
            and objectstore.settings_for(options) is not None):
        return LazyS3FileSystem(options), LazyS3FileSystem._strip_protocol(url)
    from orderedstream.core.storage import url_to_fs as open_url

    return open_url(url, storage_options)
