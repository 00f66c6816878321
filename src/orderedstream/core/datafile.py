"""``DataFile``: the picklable descriptor of one written Parquet file.

Executors return lists of these to the driver (inside a WriterCommitMessage or a mapInArrow
result row); the driver lists them in the commit record. Paths are relative to the table root,
so a table can be moved or read through another URL scheme (``s3://`` vs ``s3a://``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DataFile:
    """One Parquet data file: ``path`` relative to the table root, byte ``size``, ``rows``,
    Hive partition values (column -> string, in partitionBy order) and, for Delta tables,
    the file's Delta statistics (``minValues`` / ``maxValues`` / ``nullCount`` per column)."""

    path: str
    size: int
    rows: int
    partition: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "size": self.size, "rows": self.rows,
                               "partition": dict(self.partition)}
        if self.stats is not None:
            out["stats"] = self.stats
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataFile:
        return cls(path=str(data["path"]), size=int(data["size"]), rows=int(data["rows"]),
                   partition={str(k): str(v) for k, v in (data.get("partition") or {}).items()},
                   stats=data.get("stats"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DataFile:
        return cls.from_dict(json.loads(text))

    def __hash__(self) -> int:  # dict field: hash on the identity that matters
        return hash((self.path, self.size, self.rows))
