"""``spark.read.format("rocksstate")``: committed state versions as a DataFrame (batch read).

The options and columns are described on :class:`RockStateDataSource`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from orderedstream.core.errors import InvariantError, OptionError, StateNotFoundError
from orderedstream.statestore import ttl as ttl_mod
from orderedstream.statestore.codecs import SchemaCodec, codec_from_spec
from orderedstream.statestore.options import StateLocation, StateStoreOptions

if TYPE_CHECKING:  # at run time loaded on first use: Spark imports this module to register
    # the source, which needs no rocksdict
    from orderedstream.statestore.rocksdb.store import RocksDBStateStore

BATCH_ROWS = 8192


@dataclass(frozen=True, kw_only=True)
class RockStateReadOptions:
    """Spark options of the ``rocksstate`` reader, parsed once (driver)."""

    location: StateLocation
    store_options: StateStoreOptions
    version: int | None = None
    partition: int | None = None
    space: str | None = None
    raw: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RockStateReadOptions:
        """Parse and check the reader's Spark options (names case-insensitive).

        Parameters
        ----------
        options
            The options given to ``spark.read.format("rocksstate")``.

        Returns
        -------
        RockStateReadOptions
            The parsed options; ``raw`` keeps them with lower-case names.

        Raises
        ------
        OptionError
            No ``location`` (or ``path``); an unknown option (with the closest known name);
            ``storage_options`` not a JSON object; ``version`` or ``partition`` not a
            non-negative integer; a ``StateStoreOptions`` field that does not parse.

        Runs on
        -------
        driver"""
        opts = {k.lower(): v for k, v in options.items()}
        url = opts.get("location") or opts.get("path")
        if not url:
            raise OptionError("rocksstate needs option 'location' (the state store's fsspec "
                              "URL, e.g. s3://bucket/state/query1)")
        unknown = sorted(set(opts) - _known_options())
        if unknown:
            hints = [f"{name!r}" + (f" (did you mean {close[0]!r}?)" if (
                close := difflib.get_close_matches(name, _known_options(), 1)) else "")
                for name in unknown]
            raise OptionError(f"rocksstate does not know option {', '.join(hints)}; accepted "
                              f"(case-insensitive): {', '.join(sorted(_known_options()))}")
        storage: Any = {}
        if opts.get("storage_options"):
            # never the value in the message: it holds S3 keys
            wrong = "rocksstate option 'storage_options' must be a JSON object of fsspec arguments"
            try:
                storage = json.loads(opts["storage_options"])
            except ValueError as exc:
                raise OptionError(f"{wrong}, e.g. json.dumps({{'key': ..., 'client_kwargs': "
                                  f"{{'endpoint_url': ...}}}}); it is not JSON ({exc.args[0]})"
                                  ) from None
            if not isinstance(storage, dict):
                raise OptionError(f"{wrong}, got a JSON {type(storage).__name__}")

        def integer(name: str) -> int | None:
            if opts.get(name) in (None, ""):
                return None
            try:
                value = int(opts[name])
            except ValueError as exc:
                raise OptionError(f"rocksstate option {name}={opts[name]!r}: a non-negative "
                                  "integer is required") from exc
            if value < 0:
                raise OptionError(f"rocksstate option {name}={value}: must be >= 0")
            return value

        return cls(location=StateLocation(url, storage_options=storage),
                   store_options=StateStoreOptions.from_strings(opts),
                   version=integer("version"), partition=integer("partition"),
                   space=opts.get("space") or None, raw=opts)

    def store(self) -> RocksDBStateStore:
        """A state store on the options' location (imports rocksdict on first use).

        Returns
        -------
        RocksDBStateStore
            A new store object; nothing is read until it is used.

        Runs on
        -------
        both"""
        from orderedstream.statestore.rocksdb.store import RocksDBStateStore

        return RocksDBStateStore(self.location, self.store_options)


_TABLE_OPTIONS = ("table", "batchid", "topic")
"""The ordered stage's options (``orderedstream.statestore.ordered.state_source``)."""


def _known_options() -> set[str]:
    """Every option ``rocksstate`` takes, lower case (Spark's option names are case-blind)."""
    store = {f.name.lower() for f in fields(StateStoreOptions) if f.name != "space_codecs"}
    return {"location", "path", "version", "partition", "space", "storage_options",
            *_TABLE_OPTIONS, *store}


BASE_FIELDS = [pa.field("partition", pa.int32()), pa.field("version", pa.int64()),
               pa.field("space", pa.string()), pa.field("key", pa.binary()),
               pa.field("key_str", pa.string())]
TAIL_FIELDS = [pa.field("expires_at_ms", pa.int64())]


class RockStateDataSource(DataSource):
    """Batch reader of committed state. Constructed on the driver; pickled to executors.

    Options (case-insensitive): ``location`` (required fsspec URL), ``version`` (default:
    each partition's latest), ``partition`` (default: all), ``space`` (default: all spaces),
    ``storage_options`` (JSON object for fsspec, e.g. s3 endpoint and keys) and any
    ``StateStoreOptions`` field (``local_dir``, ``block_cache_bytes``, ...).

    Columns: ``partition``, ``version``, ``space``, ``key`` (binary), ``key_str`` (UTF-8 key
    or null), ``value`` and ``expires_at_ms``. ``value`` is JSON text of the decoded value;
    when ``space`` names a space stored with a ``SchemaCodec``, a struct of that schema."""

    @classmethod
    def name(cls) -> str:
        """The format name Spark registers the source under: ``"rocksstate"``."""
        return "rocksstate"

    def _parsed(self) -> RockStateReadOptions:
        return RockStateReadOptions.parse(self.options)

    def _arrow_schema(self) -> pa.Schema:
        parsed = self._parsed()
        value_type: pa.DataType = pa.string()
        if parsed.space is not None:
            store = parsed.store()
            parts = [parsed.partition] if parsed.partition is not None else store.partitions()
            for p in parts:
                version = parsed.version if parsed.version is not None else \
                    store.latest_version(p)
                if version < 0:
                    continue
                spec = store.read_manifest(p, version).spaces.get(parsed.space)
                if spec is not None:
                    codec = codec_from_spec(spec)
                    if isinstance(codec, SchemaCodec):
                        value_type = pa.struct(list(codec.schema))
                break
        return pa.schema([*BASE_FIELDS, pa.field("value", value_type), *TAIL_FIELDS])

    def schema(self) -> StructType:
        """The DataFrame's schema; reads one manifest when ``space`` is given.

        The manifest tells the space's codec: a ``SchemaCodec`` types ``value`` as its struct.

        Returns
        -------
        StructType
            The columns listed on the class.

        Raises
        ------
        OptionError
            The options do not parse (see :meth:`RockStateReadOptions.parse`).
        CorruptStateError
            The manifest read to type ``value`` is missing or unreadable.

        Runs on
        -------
        driver"""
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self._arrow_schema())

    def reader(self, schema: StructType) -> DataSourceReader:
        """The reader Spark plans partitions with and pickles to executors.

        Parameters
        ----------
        schema
            The schema Spark resolved (from :meth:`schema`); the reader types rows by its
            own Arrow schema, which is the same.

        Returns
        -------
        DataSourceReader
            A :class:`RockStateReader` of the parsed options.

        Raises
        ------
        OptionError
            The options do not parse.

        Runs on
        -------
        driver"""
        return RockStateReader(self._parsed(), self._arrow_schema())


@dataclass(frozen=True)
class _Split(InputPartition):
    partition: int
    version: int


class RockStateReader(DataSourceReader):
    """``partitions`` runs on the driver; ``read`` on executors (picklable: options only)."""

    def __init__(self, options: RockStateReadOptions, arrow_schema: pa.Schema) -> None:
        self.options = options
        self.arrow_schema = arrow_schema

    def partitions(self) -> list[InputPartition]:
        """One input partition per state partition read, with the version to read.

        Returns
        -------
        list[InputPartition]
            The given ``partition`` or every committed one, each at ``version`` or its latest.

        Raises
        ------
        StateNotFoundError
            No partition was ever committed at the location; a partition has no committed
            version; or the given ``version`` was never committed (the last ones are named).

        Runs on
        -------
        driver"""
        store = self.options.store()
        parts = ([self.options.partition] if self.options.partition is not None
                 else store.partitions())
        if not parts:  # Spark would read one empty partition: say the location has no state
            raise StateNotFoundError(f"no state partition was ever committed at "
                                     f"{self.options.location.url}: check the location URL")
        splits: list[InputPartition] = []
        for p in parts:
            version = self.options.version
            if version is None:
                version = store.latest_version(p)
                if version < 0:
                    raise StateNotFoundError(f"partition {p} has no committed state at "
                                             f"{self.options.location.url}")
            elif store.index.resolve(p, version) is None:
                raise StateNotFoundError(
                    f"state version {version} of partition {p} was never committed at "
                    f"{self.options.location.url}; committed: {store.index.versions(p)[-10:]}")
            splits.append(_Split(p, version))
        return splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Restore one planned version into a private temporary copy and stream its rows.

        Parameters
        ----------
        partition
            One of the partitions :meth:`partitions` planned.

        Returns
        -------
        Iterator[pa.RecordBatch]
            Rows of the version's spaces (or of ``space``), in batches of ``BATCH_ROWS``.

        Raises
        ------
        InvariantError
            ``partition`` is not one this reader planned.
        CorruptStateError
            The version's files are missing or do not match their checksums.

        Runs on
        -------
        executor"""
        if not isinstance(partition, _Split):
            raise InvariantError(f"rocksstate reader got a {type(partition).__name__} to read, "
                                 "not one of the partitions it planned")
        store = self.options.store()
        value_type = self.arrow_schema.field("value").type
        with store.open_read_only(partition.partition, partition.version) as part:
            spaces = [self.options.space] if self.options.space else part.spaces()
            for space in spaces:
                rows: list[dict[str, Any]] = []
                for key, raw in part.raw_items(space=space):
                    payload, expires = ttl_mod.unframe(raw)
                    value = part.decode(space, payload)
                    try:
                        key_str: str | None = key.decode()
                    except UnicodeDecodeError:
                        key_str = None
                    rows.append({"partition": partition.partition,
                                 "version": partition.version, "space": space, "key": key,
                                 "key_str": key_str,
                                 "value": value if pa.types.is_struct(value_type)
                                 else json.dumps(value, default=str),
                                 "expires_at_ms": expires})
                    if len(rows) >= BATCH_ROWS:
                        yield pa.RecordBatch.from_pylist(rows, schema=self.arrow_schema)
                        rows = []
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=self.arrow_schema)
