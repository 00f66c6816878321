"""A version's manifest: the files that make the RocksDB checkpoint, with sizes and checksums.

It also records the changelog chain replayed on top of the checkpoint (changelog mode, see
docs/decisions/0018-changelog-snapshots.md), key counts, each state space's codec (so any
reader can decode) and who wrote it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from dataclasses import dataclass, field, fields
from typing import Any

from orderedstream.core.errors import CorruptStateError, InvariantError, UnsupportedFormatError
from orderedstream.core.storage import read_object

VALUES_FORMAT = 3
"""Values may be stored without a frame (``orderedstream.statestore.ttl``), so readers that
predate it refuse these manifests by number instead of misreading values."""
FORMAT = 4
"""The newest this version writes: a changelog chain with inlined logs. Written only when the
chain holds one (else ``VALUES_FORMAT``), so readers that predate it refuse exactly the
manifests they could not restore (they would look for the log's remote file)."""
CHANGELOG_FORMAT = 2
"""Manifests with a changelog chain, all values framed (read as before)."""
READABLE_FORMATS = (1, CHANGELOG_FORMAT, VALUES_FORMAT, FORMAT)


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One checkpoint file: ``name`` in the DB dir; ``remote`` path (relative to the location
    root) or ``inline`` base64 content; ``size`` in bytes; ``sha256`` hex of the content."""

    name: str
    size: int
    sha256: str
    remote: str | None = None
    inline: str | None = None

    def content(self) -> bytes:
        """The inlined file's bytes (only for entries without ``remote``)."""
        if self.inline is None:
            raise InvariantError(f"state file {self.name} is not inlined in its manifest "
                                 f"(remote {self.remote}): it has no content to read")
        return base64.b64decode(self.inline)


_ENTRY_FIELDS = tuple(f.name for f in fields(FileEntry))
# SST files are referenced by remote name (shared between versions); the small non-SST files
# (CURRENT, MANIFEST-*, OPTIONS-*, ...) are inlined. A small changelog is inlined too
# (``StateStoreOptions.changelog_inline_bytes``), which saves its PUT and its GET.


def format_for(changelog: tuple[FileEntry, ...]) -> int:
    """The format a manifest with this changelog chain is written in.

    ``FORMAT`` only when a log is inlined, else ``VALUES_FORMAT``, so that readers from
    before inlined logs still read every manifest they can restore.

    Parameters
    ----------
    changelog
        The manifest's changelog chain (empty for a checkpoint-only manifest).

    Returns
    -------
    int
        ``FORMAT`` or ``VALUES_FORMAT``.

    Runs on
    -------
    executor"""
    return FORMAT if any(e.inline is not None for e in changelog) else VALUES_FORMAT


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """One committed version of one partition's state: its checkpoint files and changelogs.

    Written as JSON next to the version (:meth:`to_json`) and read back by restore, the
    state reader and retention (:meth:`from_json`, :func:`read_manifest`).

    Attributes
    ----------
    partition, version, parent_version
        The partition, this version and the version it was built on.
    parent_manifest
        The parent version's manifest path, or ``None`` for the first version.
    files
        The last full checkpoint's files.
    num_keys, key_counts
        Keys in all, and per state space.
    ttl_entries
        Meant for the expiry index's entry count; no writer sets it now (0).
    spaces
        State space name -> codec spec.
    writer, created_at
        :func:`writer_identity` of the writer; the write's epoch time in seconds.
    format
        The manifest format number (see ``READABLE_FORMATS``).
    extra
        The writer's own metadata, kept as given.
    changelog
        Write logs of the versions after the checkpoint in ``files``, oldest first."""

    partition: int
    version: int
    parent_version: int
    parent_manifest: str | None
    files: tuple[FileEntry, ...]
    num_keys: int
    key_counts: dict[str, int]
    spaces: dict[str, dict[str, Any]]
    """space name -> codec spec."""
    writer: dict[str, Any]
    created_at: float
    ttl_entries: int = 0
    format: int = VALUES_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)
    changelog: tuple[FileEntry, ...] = ()
    """Write logs of the versions after the checkpoint in ``files`` (oldest first)."""

    def to_json(self) -> bytes:
        """The manifest as compact, key-sorted JSON (an empty changelog is left out).

        Returns
        -------
        bytes
            UTF-8 JSON that :meth:`from_json` reads back.

        Runs on
        -------
        executor"""
        # Field by field, not dataclasses.asdict: asdict deep-copies every entry and value,
        # a cost on every partition task's commit; json.dumps only reads them.
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("files", "changelog"):
            data[name] = [{k: v for k in _ENTRY_FIELDS if (v := getattr(e, k)) is not None}
                          for e in data[name]]
        if not data["changelog"]:
            del data["changelog"]  # checkpoint-only manifests stay as readers before it knew
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes, path: str = "<manifest>") -> Manifest:
        """Parse a manifest written by :meth:`to_json`.

        Parameters
        ----------
        raw
            The manifest object's bytes.
        path
            Where it was read from, for error messages.

        Returns
        -------
        Manifest
            The parsed manifest.

        Raises
        ------
        UnsupportedFormatError
            The format is newer than this reader knows (read it with a newer orderedstream).
        CorruptStateError
            Not JSON, not an object, an unknown format, or missing or unexpected fields.

        Runs on
        -------
        both"""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise CorruptStateError(f"state manifest {path} is unreadable: {exc}") from exc
        if not isinstance(data, dict):
            raise CorruptStateError(f"state manifest {path} is unreadable: a JSON object is "
                                    f"required, got {type(data).__name__}")
        fmt = data.get("format")
        if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT:
            raise UnsupportedFormatError(
                f"state manifest {path} has format {fmt}, newer than this reader knows "
                f"({list(READABLE_FORMATS)}): it was written by a newer orderedstream; read it "
                "with that version or a later one")
        if fmt not in READABLE_FORMATS:
            raise CorruptStateError(f"state manifest {path} is unreadable: unknown format "
                                    f"{fmt!r} (this reader knows {list(READABLE_FORMATS)})")
        try:
            data["files"] = tuple(FileEntry(**f) for f in data["files"])
            data["changelog"] = tuple(FileEntry(**f) for f in data.get("changelog", ()))
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptStateError(f"state manifest {path} is unreadable: {exc}") from exc

    def sst_entries(self) -> list[FileEntry]:
        """The checkpoint's uploaded files (changelogs excluded)."""
        return [f for f in self.files if f.remote is not None]

    def remote_entries(self) -> list[FileEntry]:
        """Every uploaded file the version needs: checkpoint files, then changelogs (inlined
        logs excluded)."""
        return [*self.sst_entries(), *(e for e in self.changelog if e.remote is not None)]

    @property
    def total_bytes(self) -> int:
        """Bytes of every file the version consists of: checkpoint files and changelogs."""
        return sum(f.size for f in self.files) + sum(f.size for f in self.changelog)


def writer_identity(writer: str | None, attempt: str) -> dict[str, Any]:
    """Who wrote a manifest: the caller's label, host, process id and attempt id.

    Parameters
    ----------
    writer
        The caller's label (e.g. the Spark task attempt), or ``None`` for none.
    attempt
        The writing attempt's id.

    Returns
    -------
    dict[str, Any]
        ``{"writer", "host", "pid", "attempt"}`` for ``Manifest.writer``.

    Runs on
    -------
    executor"""
    return {"writer": writer or "", "host": socket.gethostname(), "pid": os.getpid(),
            "attempt": attempt}


def read_manifest(fs: Any, root: str, rel_path: str) -> Manifest:
    """Load a manifest by its location-relative path (one GET).

    Parameters
    ----------
    fs
        The location's filesystem (fsspec-like, as :func:`read_object` takes).
    root
        The state location's root path.
    rel_path
        The manifest's path relative to ``root``.

    Returns
    -------
    Manifest
        The parsed manifest.

    Raises
    ------
    CorruptStateError
        The manifest is missing (the location was damaged) or unreadable.
    UnsupportedFormatError
        It was written in a newer format than this reader knows.

    Runs on
    -------
    both"""
    path = f"{root}/{rel_path}"
    try:
        raw = read_object(fs, path)  # one GET on S3 (no size HEAD)
    except FileNotFoundError as exc:
        raise CorruptStateError(
            f"state manifest {path} is missing although a version points to it; the state "
            "location was damaged (retention run elsewhere, or files removed by hand)") from exc
    return Manifest.from_json(raw, path)
