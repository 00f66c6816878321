"""``FencedParquetOptions``: every sink option, parsed once from strings, validated.

Spark hands Data Source options over as a case-insensitive dict of strings; ``foreachBatch``
users pass Python values. Both go through ``FencedParquetOptions.from_mapping`` so the two
entry points accept the same names with the same errors.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orderedstream.core.errors import OptionError
from orderedstream.core.units import parse_size_bytes

COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")

# Spark option name (lower-cased) -> dataclass field.
_NAMES = {
    "path": "path", "storageoptions": "storage_options", "writerid": "writer_id",
    "partitionby": "partition_by", "compression": "compression",
    "compressionlevel": "compression_level", "rowgrouprows": "row_group_rows",
    "rowgroupbytes": "row_group_bytes",
    "targetfilesize": "target_file_bytes", "targetfilebytes": "target_file_bytes",
    "metadatacompactinterval": "metadata_compact_interval",
    "maxopenfiles": "max_open_files",
}

# The names the errors list (Spark's spelling; the field names are accepted too).
ACCEPTED = ("path", "storageOptions", "writerId", "partitionBy", "compression",
            "compressionLevel", "rowGroupRows", "rowGroupBytes", "targetFileSize",
            "maxOpenFiles", "metadataCompactInterval")

# Options Spark itself consumes that still reach a data source's option map.
_SPARK_OWNED = {"checkpointlocation", "queryname"}


def parse_size(name: str, value: Any) -> int:
    """A size option in bytes: ``134217728``, ``"128MB"``, ``"128m"``, ``"1GiB"``.

    Parameters
    ----------
    name
        The option's name, as errors give it (``option <name>``).
    value
        An int, or a number with an optional unit.

    Returns
    -------
    int
        The size in bytes, greater than 0.

    Raises
    ------
    OptionError
        ``value`` is not a size, or not positive.

    Runs on
    -------
    driver"""
    return parse_size_bytes(value, f"option {name}")


def _positive_int(name: str, value: Any, maximum: int | None = None) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise OptionError(f"option {name}={value!r} is not an integer") from None
    if number <= 0 or (maximum is not None and number > maximum):
        bound = f"1..{maximum}" if maximum is not None else "a positive integer"
        raise OptionError(f"option {name}={value!r} is out of range: use {bound}")
    return number


@dataclass(frozen=True, kw_only=True)
class FencedParquetOptions:
    """Validated sink options, keyword-only. Picklable (executors receive a copy).

    - ``path``: table root, any fsspec URL (``s3://bucket/t``, ``/local/dir``, ``file://...``).
    - ``storage_options``: fsspec keyword arguments (Spark option: a JSON object string).
    - ``writer_id``: names this writer in commit records and errors (default ``"default"``).
    - ``partition_by``: Hive-style partition columns (Spark option: comma separated).
    - ``compression`` (zstd default) / ``compression_level``; ``row_group_rows`` (rows per
      Parquet row group, also the rows buffered per open file); ``row_group_bytes`` (a row
      group also ends once its Arrow data reaches this size, default 8 MiB: bounds the
      memory per open file, and a task encodes and uploads while Spark still sends rows;
      docs/decisions/0020-parquet-row-group-bytes.md); ``target_file_bytes`` (roll
      to a new file past this size); ``max_open_files`` (per task, bounds memory when
      writing many partitions); ``metadata_compact_interval``: ``_spark_metadata`` compacts
      every N versions (1..10: Spark readers derive the interval from the files and only
      agree with intervals up to their default of 10).
    - ``file_stats``: also collect each file's Delta statistics (set by the Delta writers).
    """

    path: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    writer_id: str = "default"
    partition_by: tuple[str, ...] = ()
    compression: str = "zstd"
    compression_level: int | None = None
    row_group_rows: int = 1_000_000
    row_group_bytes: int = 8 * 1024**2
    target_file_bytes: int = 128 * 1024**2
    max_open_files: int = 32
    metadata_compact_interval: int = 10
    file_stats: bool = False

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], *, sink: str = "fencedparquet",
                     ) -> FencedParquetOptions:
        """Parse Spark-style (string) or Python options, by Spark name (``partitionBy``) or
        field name (``partition_by``); unknown names are refused (OptionError naming the
        closest accepted name and listing them all), None values ignored.

        Parameters
        ----------
        options
            Option name -> value; Spark's option names (``checkpointLocation``, ``queryName``)
            are skipped.
        sink
            The format errors name (``"fencedparquet"``, ``"fenceddelta"``).

        Returns
        -------
        FencedParquetOptions
            The validated options (``path`` without a trailing slash).

        Raises
        ------
        OptionError
            An unknown option, no ``path``, ``storageOptions`` not a JSON object,
            ``partitionBy`` naming a column twice, an unsupported ``compression``, or a
            number or size out of range.

        Runs on
        -------
        driver"""
        raw: dict[str, Any] = {}
        for key, value in options.items():
            normal = key.replace("_", "").lower()
            if normal in _SPARK_OWNED:
                continue
            if normal not in _NAMES:
                raise OptionError(unknown_option_message(sink, key))
            if value is not None:
                raw[_NAMES[normal]] = value
        if not raw.get("path"):
            raise OptionError(f"{sink} needs option 'path' (the table root URL, e.g. "
                              "s3://bucket/table or /data/table)")
        storage = raw.get("storage_options", {})
        if isinstance(storage, str):
            try:
                storage = json.loads(storage) if storage.strip() else {}
            except json.JSONDecodeError as exc:
                raise OptionError(f"option storageOptions is not valid JSON: {exc}") from None
        if not isinstance(storage, dict):
            raise OptionError("option storageOptions must be a JSON object of fsspec arguments")
        parts = raw.get("partition_by", ())
        if isinstance(parts, str):
            parts = [p.strip() for p in parts.split(",") if p.strip()]
        parts = tuple(str(p) for p in parts)
        if len(set(parts)) != len(parts):
            raise OptionError(f"option partitionBy={list(parts)} names a column twice")
        compression = str(raw.get("compression", "zstd")).lower()
        if compression == "uncompressed":
            compression = "none"
        if compression not in COMPRESSIONS:
            raise OptionError(f"option compression={raw.get('compression')!r} is not supported; "
                              f"accepted: {', '.join(COMPRESSIONS)}")
        level = raw.get("compression_level")
        return cls(
            path=str(raw["path"]).rstrip("/"), storage_options=storage,
            writer_id=str(raw.get("writer_id", "default")), partition_by=parts,
            compression=compression,
            compression_level=None if level is None else _positive_int("compressionLevel",
                                                                       level, 22),
            row_group_rows=_positive_int("rowGroupRows", raw.get("row_group_rows", 1_000_000)),
            row_group_bytes=parse_size("rowGroupBytes",
                                       raw.get("row_group_bytes", 8 * 1024**2)),
            target_file_bytes=parse_size("targetFileSize",
                                         raw.get("target_file_bytes", 128 * 1024**2)),
            max_open_files=_positive_int("maxOpenFiles", raw.get("max_open_files", 32)),
            metadata_compact_interval=_positive_int(
                "metadataCompactInterval", raw.get("metadata_compact_interval", 10), 10),
        )


def unknown_option_message(sink: str, key: str) -> str:
    """``unknown <sink> option 'key' (did you mean 'close'?); accepted: ...``: the hint when
    an accepted name is close (difflib; Spark hands option names over lower-cased).

    Parameters
    ----------
    sink
        The format the message names.
    key
        The refused option name, as given.

    Returns
    -------
    str
        The error message.

    Runs on
    -------
    driver"""
    by_normal = {name.lower(): name for name in ACCEPTED}
    close = difflib.get_close_matches(key.replace("_", "").lower(), list(by_normal), n=1,
                                      cutoff=0.7)
    hint = f" (did you mean {by_normal[close[0]]!r}?)" if close else ""
    return f"unknown {sink} option {key!r}{hint}; accepted: {', '.join(sorted(ACCEPTED))}"
