"""The two small objects of the commit log: a writer ``Epoch`` and a ``CommitRecord``.

Both are frozen, picklable and JSON round-trippable. Parsing refuses what this version cannot
trust: a record of a newer format (``UnsupportedFormatError``) or a malformed one
(``CorruptLogError``, naming the file), so a reader never acts on a guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orderedstream.core.datafile import DataFile
from orderedstream.core.errors import CorruptLogError, UnsupportedFormatError

FORMAT_VERSION = 1


def _parse_object(data: bytes | str, where: str) -> dict[str, Any]:
    """``data`` as a JSON object, or CorruptLogError naming ``where``."""
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise CorruptLogError(f"{where} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CorruptLogError(f"{where} holds {type(raw).__name__}, not a JSON object")
    return raw


@dataclass(frozen=True)
class Epoch:
    """A writer epoch: ``number`` grows by one per claim; ``token`` is unique to the claim.

    Picklable; pass it to executors if they need to stamp output with it.
    """

    number: int
    writer_id: str
    token: str

    def to_json(self) -> str:
        """The epoch as the JSON text of ``_fenced/epoch.json`` (keys sorted).

        Returns
        -------
        str
            ``{"epoch": ..., "token": ..., "writer_id": ...}``.

        Runs on
        -------
        driver
        """
        return json.dumps({"epoch": self.number, "writer_id": self.writer_id,
                           "token": self.token}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "the writer epoch") -> Epoch:
        """Parse an epoch written by ``to_json``.

        Parameters
        ----------
        text
            The JSON text.
        where
            How the error names the source (its path).

        Returns
        -------
        Epoch
            The parsed epoch.

        Raises
        ------
        CorruptLogError
            ``text`` is not a JSON object with an integer ``epoch``, a ``writer_id``
            and a ``token``.

        Runs on
        -------
        driver
        """
        data = _parse_object(text, where)
        try:
            return cls(int(data["epoch"]), str(data["writer_id"]), str(data["token"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptLogError(f"{where} is malformed ({exc!r}): {data!r}") from None


@dataclass(frozen=True)
class CommitRecord:
    """One immutable table version.

    ``files`` are data files made visible by this version, ``removes`` are relative paths of
    files it retires (compaction), ``schema`` is the table's Arrow schema after this version
    (base64 IPC, see ``orderedstream.sinks.schema``), ``extra`` arbitrary JSON from the committer.
    """

    version: int
    batch_id: int | None
    epoch: int
    writer_id: str
    token: str
    files: tuple[DataFile, ...] = ()
    removes: tuple[str, ...] = ()
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0

    @property
    def rows(self) -> int:
        """The rows this version's ``files`` add (their ``rows`` summed)."""
        return sum(f.rows for f in self.files)

    def to_json(self) -> bytes:
        """The record as the UTF-8 JSON of its log file, stamped with ``FORMAT_VERSION``.

        Returns
        -------
        bytes
            The record's JSON, keys sorted.

        Runs on
        -------
        driver
        """
        return json.dumps({
            "format": FORMAT_VERSION, "version": self.version, "batch_id": self.batch_id,
            "epoch": self.epoch, "writer_id": self.writer_id, "token": self.token,
            "files": [f.to_dict() for f in self.files], "removes": list(self.removes),
            "schema": self.schema, "extra": self.extra, "created_at": self.created_at,
        }, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str, where: str = "a commit record") -> CommitRecord:
        """Parse a record written by ``to_json``.

        Parameters
        ----------
        data
            The record's JSON.
        where
            How the error names the record (its path).

        Returns
        -------
        CommitRecord
            The parsed record.

        Raises
        ------
        UnsupportedFormatError
            The record has a newer format than ``FORMAT_VERSION``.
        CorruptLogError
            It is not JSON, has no valid format field, or lacks or mistypes a field.

        Runs on
        -------
        driver
        """
        raw = _parse_object(data, where)
        found = raw.get("format")
        if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"{where} has format {found}; this version reads format {FORMAT_VERSION}: "
                "it was written by a newer orderedstream, upgrade to read it")
        if found != FORMAT_VERSION:
            raise CorruptLogError(f"{where} has no valid format field ({found!r}; expected "
                                  f"{FORMAT_VERSION}): not a commit record")
        try:
            batch = raw.get("batch_id")
            return cls(version=int(raw["version"]),
                       batch_id=None if batch is None else int(batch),
                       epoch=int(raw["epoch"]), writer_id=str(raw["writer_id"]),
                       token=str(raw["token"]),
                       files=tuple(DataFile.from_dict(f) for f in raw.get("files") or []),
                       removes=tuple(str(p) for p in raw.get("removes") or []),
                       schema=raw.get("schema"), extra=dict(raw.get("extra") or {}),
                       created_at=float(raw.get("created_at", 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptLogError(f"{where} is malformed ({exc!r})") from None


__all__ = ["FORMAT_VERSION", "CommitRecord", "Epoch"]
