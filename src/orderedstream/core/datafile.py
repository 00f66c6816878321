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
        """The file as a JSON-ready dict (``stats`` only when set).

        Returns
        -------
        dict[str, Any]
            ``path``, ``size``, ``rows``, ``partition`` and perhaps ``stats``.

        Runs on
        -------
        both (executors return files to the driver)
        """
        out: dict[str, Any] = {"path": self.path, "size": self.size, "rows": self.rows,
                               "partition": dict(self.partition)}
        if self.stats is not None:
            out["stats"] = self.stats
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataFile:
        """Build a file from a dict of ``to_dict``'s shape.

        Parameters
        ----------
        data
            ``path``, ``size`` and ``rows``, and optionally ``partition`` and ``stats``.

        Returns
        -------
        DataFile
            The file, with partition values as strings.

        Raises
        ------
        KeyError
            ``path``, ``size`` or ``rows`` is missing.
        ValueError
            ``size`` or ``rows`` is not an integer.

        Runs on
        -------
        both
        """
        return cls(path=str(data["path"]), size=int(data["size"]), rows=int(data["rows"]),
                   partition={str(k): str(v) for k, v in (data.get("partition") or {}).items()},
                   stats=data.get("stats"))

    def to_json(self) -> str:
        """The file as JSON text (``to_dict``, keys sorted).

        Returns
        -------
        str
            The JSON text.

        Runs on
        -------
        both
        """
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DataFile:
        """Parse a file written by ``to_json``.

        Parameters
        ----------
        text
            The JSON text.

        Returns
        -------
        DataFile
            The file.

        Raises
        ------
        ValueError
            ``text`` is not JSON (``json.JSONDecodeError``) or a field is mistyped.
        KeyError
            A required field is missing.

        Runs on
        -------
        both
        """
        return cls.from_dict(json.loads(text))

    def __hash__(self) -> int:  # dict field: hash on the identity that matters
        return hash((self.path, self.size, self.rows))
