"""The default ``VersionIndex``: one pointer object per (partition, version), created exclusively.

``p=<P>/versions/<N>.json`` holds the manifest path of version N. Creating it is the publish
step (S3 ``If-None-Match: *``, local ``O_EXCL`` via ``orderedstream.core.storage``): of two
attempts for the same batch exactly one wins; the other gets ``CommitConflictError``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from orderedstream.core.errors import CommitConflictError, CorruptStateError
from orderedstream.core.storage import create_exclusive, read_object
from orderedstream.statestore.base import CommitCandidate
from orderedstream.statestore.options import StateLocation

POINTER_DIR = "versions"


class PointerVersionIndex:
    """Pointers under the state location itself. Picklable (holds only the location)."""

    def __init__(self, location: StateLocation) -> None:
        self.location = location
        self._fs: Any = None
        self._root = ""

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["location"])  # type: ignore[misc]

    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None:
            self._fs, self._root = self.location.filesystem()
        return self._fs, self._root

    def _pointer(self, partition: int, version: int) -> str:
        _, root = self._filesystem()
        return f"{root}/{StateLocation.partition_dir(partition)}/{POINTER_DIR}/{version}.json"

    def resolve(self, partition: int, version: int) -> str | None:
        """The manifest path in the pointer of ``version`` of ``partition``, or None if no
        pointer exists (listing caches are dropped first, so a fresh pointer is seen).

        Parameters
        ----------
        partition, version
            Which published version to look up.

        Raises
        ------
        CorruptStateError
            The pointer exists but does not hold ``{"manifest": <path>}``.

        Runs on
        -------
        both (executors at open, the driver in retention and readers)"""
        fs, _ = self._filesystem()
        path = self._pointer(partition, version)
        try:
            fs.invalidate_cache(path)
            data = read_object(fs, path)
        except FileNotFoundError:
            return None
        try:
            return str(json.loads(data)["manifest"])
        except (ValueError, KeyError) as exc:
            raise CorruptStateError(f"version pointer {path} is unreadable ({exc}); it should "
                                    "hold {'manifest': <path>}") from exc

    def publish(self, candidate: CommitCandidate) -> None:
        """Create the pointer of ``candidate``'s (partition, version) exclusively. A retry
        whose earlier attempt already created the same pointer succeeds.

        Parameters
        ----------
        candidate
            The prepared candidate to publish.

        Raises
        ------
        CommitConflictError
            Another attempt's manifest holds that version; reopen at it to continue.

        Runs on
        -------
        both (the committing task, or the driver)"""
        fs, _ = self._filesystem()
        path = self._pointer(candidate.partition, candidate.version)
        body = json.dumps({"partition": candidate.partition, "version": candidate.version,
                           "manifest": candidate.manifest_path, "writer": candidate.writer,
                           "published_at": time.time()}, sort_keys=True).encode()
        if create_exclusive(fs, path, body):
            return
        winner = self.resolve(candidate.partition, candidate.version)
        if winner == candidate.manifest_path:
            return  # an earlier retry of this same publish got there
        raise CommitConflictError(
            f"state version {candidate.version} of partition {candidate.partition} at "
            f"{self.location.url} was already committed by another attempt ({winner}); this "
            f"attempt ({candidate.writer}, {candidate.manifest_path}) is refused. Reopen at "
            f"version {candidate.version} to continue from the committed state.")

    def versions(self, partition: int) -> list[int]:
        """Versions with a pointer under ``partition``'s directory, ascending (none: ``[]``).

        Parameters
        ----------
        partition
            The partition whose versions to list.

        Runs on
        -------
        both"""
        fs, root = self._filesystem()
        directory = f"{root}/{StateLocation.partition_dir(partition)}/{POINTER_DIR}"
        fs.invalidate_cache(directory)
        try:
            names = fs.ls(directory, detail=False)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            base = name.rstrip("/").rsplit("/", 1)[-1]
            if base.endswith(".json") and base[:-5].lstrip("-").isdigit():
                out.append(int(base[:-5]))
        return sorted(out)

    def forget(self, partition: int, version: int) -> None:
        """Delete the pointer of ``version`` (no error if it is already gone).

        Parameters
        ----------
        partition, version
            The published version to forget.

        Runs on
        -------
        driver (retention)"""
        fs, _ = self._filesystem()
        try:
            fs.rm_file(self._pointer(partition, version))
        except FileNotFoundError:
            pass
