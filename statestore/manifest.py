"""A version's manifest: the files that make the RocksDB checkpoint, with sizes and checksums.

SST files are referenced by remote name (shared between versions); the few small non-SST
files (CURRENT, MANIFEST-*, OPTIONS-*, ...) are inlined when small. In changelog mode
(``orderedstream.statestore.rocksdb.changelog``) ``files`` is the last full checkpoint and
``changelog`` the
per-version write logs replayed on top of it, oldest first. The manifest also records key
counts, the codec of each state space (so any reader can decode) and who wrote it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from orderedstream.core.errors import CorruptStateError

FORMAT = 3
"""Written by this version: values may be stored without a frame
(``orderedstream.statestore.ttl``), so
readers that predate it refuse these manifests by number instead of misreading values."""
CHANGELOG_FORMAT = 2
"""Manifests with a changelog chain, all values framed (read as before)."""
READABLE_FORMATS = (1, CHANGELOG_FORMAT, FORMAT)


@dataclass(frozen=True)
class FileEntry:
    """One checkpoint file: ``name`` in the DB dir; ``remote`` path (relative to the location
    root) or ``inline`` base64 content; ``size`` in bytes; ``sha256`` hex of the content."""

    name: str
    size: int
    sha256: str
    remote: str | None = None
    inline: str | None = None

    def content(self) -> bytes:
        assert self.inline is not None
        return base64.b64decode(self.inline)


@dataclass(frozen=True)
class Manifest:
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
    format: int = FORMAT
    extra: dict[str, Any] = field(default_factory=dict)
    changelog: tuple[FileEntry, ...] = ()
    """Write logs of the versions after the checkpoint in ``files`` (oldest first)."""

    def to_json(self) -> bytes:
        data = asdict(self)
        for name in ("files", "changelog"):
            data[name] = [{k: v for k, v in f.items() if v is not None} for f in data[name]]
        if not data["changelog"]:
            del data["changelog"]  # checkpoint-only manifests stay as readers before it knew
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes, path: str = "<manifest>") -> Manifest:
        try:
            data = json.loads(raw)
            if data.get("format") not in READABLE_FORMATS:
                raise ValueError(f"unsupported manifest format {data.get('format')!r} "
                                 f"(this reader knows {list(READABLE_FORMATS)})")
            data["files"] = tuple(FileEntry(**f) for f in data["files"])
            data["changelog"] = tuple(FileEntry(**f) for f in data.get("changelog", ()))
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptStateError(f"state manifest {path} is unreadable: {exc}") from exc

    def sst_entries(self) -> list[FileEntry]:
        """The checkpoint's uploaded files (changelogs excluded)."""
        return [f for f in self.files if f.remote is not None]

    def remote_entries(self) -> list[FileEntry]:
        """Every uploaded file the version needs: checkpoint files, then changelogs."""
        return [*self.sst_entries(), *self.changelog]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files) + sum(f.size for f in self.changelog)


def writer_identity(writer: str | None, attempt: str) -> dict[str, Any]:
    """Who wrote a manifest: caller's label (e.g. Spark task attempt), host, pid, attempt id."""
    return {"writer": writer or "", "host": socket.gethostname(), "pid": os.getpid(),
            "attempt": attempt}


def read_manifest(fs: Any, root: str, rel_path: str) -> Manifest:
    """Load a manifest by its location-relative path; missing or garbled -> CorruptStateError."""
    path = f"{root}/{rel_path}"
    try:
        raw = fs.cat_file(path)
    except FileNotFoundError as exc:
        raise CorruptStateError(
            f"state manifest {path} is missing although a version points to it; the state "
            "location was damaged (retention run elsewhere, or files removed by hand)") from exc
    return Manifest.from_json(raw, path)
