"""Where state lives (``StateLocation``) and how a store behaves (``StateStoreOptions``).

Both are frozen, picklable and validated once; Spark's string options go through
``StateStoreOptions.from_strings``.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import tempfile
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any

from orderedstream.core import lazys3
from orderedstream.core.errors import OptionError
from orderedstream.statestore.base import Codec
from orderedstream.statestore.codecs import PickleCodec, codec_by_name


@dataclass(frozen=True)
class StateLocation:
    """The root URL of one store's state (``s3://bucket/state/q1``, ``file:///data/q1``, any
    fsspec URL) plus the fsspec ``storage_options`` to reach it (keyword only:
    ``StateLocation(url, storage_options={...})``).

    Remote layout under ``url``: ``p=<partition>/sst/`` (SST files, unique names, shared by
    versions), ``p=<partition>/manifests/<version>-<attempt>.json`` (candidates) and
    ``p=<partition>/versions/<version>.json`` (published pointers of the default index).
    Manifest paths handed around are relative to ``url``, so a copied location still works.
    """

    url: str
    _: KW_ONLY
    storage_options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise OptionError("state location url must be a non-empty fsspec URL such as "
                              "s3://bucket/state/query1 or file:///tmp/state")
        if not isinstance(self.storage_options, Mapping):
            raise OptionError(f"state location storage_options must be a mapping of fsspec "
                              f"arguments, got {type(self.storage_options).__name__}")
        object.__setattr__(self, "url", self.url.rstrip("/"))
        object.__setattr__(self, "storage_options", dict(self.storage_options))

    def filesystem(self) -> tuple[Any, str]:
        """``(fsspec filesystem, root path in that filesystem)``."""
        try:
            fs, root = lazys3.url_to_fs(self.url, self.storage_options)
        except (ImportError, ValueError) as exc:
            raise OptionError(f"cannot open state location {self.url!r}: {exc}") from exc
        return fs, root.rstrip("/")

    def key(self) -> str:
        """A short stable id of this location (names the local copy directory)."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]

    @staticmethod
    def partition_dir(partition: int) -> str:
        """The directory of one partition's state under the location root.

        Parameters
        ----------
        partition
            The state partition.

        Returns
        -------
        str
            ``"p=<partition>"``, relative to the root.

        Runs on
        -------
        both"""
        return f"p={partition}"

    @staticmethod
    def join(*parts: str) -> str:
        """Join remote path parts with ``/`` (never the OS separator).

        Parameters
        ----------
        *parts
            Path parts, e.g. a root, :meth:`partition_dir` and a file name.

        Returns
        -------
        str
            The joined path (``posixpath.join``).

        Runs on
        -------
        both"""
        return posixpath.join(*parts)


def default_local_dir() -> str:
    """Under the Spark executor's local dir when running in one, else the temp dir."""
    spark_dirs = os.environ.get("SPARK_LOCAL_DIRS") or os.environ.get("SPARK_EXECUTOR_DIRS")
    base = spark_dirs.split(",")[0] if spark_dirs else tempfile.gettempdir()
    return os.path.join(base, "orderedstream-state")


MAX_INLINE_CHANGELOG = 1 << 20
"""The largest ``changelog_inline_bytes``: a manifest is read whole, by every restore."""


@dataclass(frozen=True, kw_only=True)
class StateStoreOptions:
    """How a store keeps, snapshots and bounds its state (all keyword, all validated).

    Memory: RocksDB's block cache (data, index and filter blocks all charged to it) plus the
    memtables (``write_buffer_bytes`` x ``max_write_buffers`` per space, capped overall by
    ``memtable_budget_bytes``) bound a worker's state memory regardless of the key count.
    Every partition a process opens with the same sizes shares one cache and one memtable
    budget, so ``memory_bound_bytes`` is per worker process, not per partition.

    Counting: with ``exact_key_count`` (the default) ``num_keys`` and the manifests' counts are
    exact; a write costs one extra lookup of its key unless the partition just read it (a
    read-modify-write, what ``OrderedStateful`` does, costs nothing extra; ``put_many`` batches
    the lookups). ``exact_key_count=False`` skips them and reports RocksDB's estimate, for
    blind-write-heavy state.

    Snapshots (docs/decisions/0018-changelog-snapshots.md): by default every commit uploads a
    checkpoint's new SST files. With
    ``changelog=True`` a commit uploads only the version's puts and deletes (a write log), and
    a full checkpoint every ``snapshot_interval`` versions; a restore replays at most
    ``snapshot_interval - 1`` logs. Bytes uploaded then follow bytes changed even when
    compaction rewrites SSTs. A log of at most ``changelog_inline_bytes`` goes inside the
    version's manifest instead of its own object (one PUT per commit and one GET per restore
    fewer), while the chain's inlined logs stay within four times that; 0 uploads every log
    (manifests then stay readable by versions before inlined logs).

    Reuse (docs/decisions/0017-keep-partitions-open.md): ``close`` keeps up to ``keep_open``
    clean partitions open in the process, so the
    next ``open`` of one at the version it holds costs no RocksDB open; another process that
    opens it has it closed first (``orderedstream.statestore.rocksdb.keepopen``). Their memory
    is within the same bound. 0 closes at once. Keeping serves other processes from a daemon
    thread, so it happens only with ``ORDEREDSTREAM_PROCESS_TUNING=1``
    (``orderedstream.core.tuning``); without it ``close`` closes.
    """

    codec: Codec = field(default_factory=PickleCodec)
    space_codecs: Mapping[str, Codec] = field(default_factory=dict, hash=False)
    local_dir: str | None = None
    block_cache_bytes: int = 64 << 20
    write_buffer_bytes: int = 16 << 20
    max_write_buffers: int = 2
    memtable_budget_bytes: int = 64 << 20
    keep_last: int = 100
    lock_timeout_s: float = 60.0
    exact_key_count: bool = True
    verify_local_cache: bool = False
    upload_concurrency: int = 8
    changelog: bool = False
    snapshot_interval: int = 10
    changelog_inline_bytes: int = 16 << 10
    keep_open: int = 16

    def __post_init__(self) -> None:
        for name in ("block_cache_bytes", "write_buffer_bytes", "max_write_buffers",
                     "memtable_budget_bytes", "keep_last", "upload_concurrency",
                     "snapshot_interval"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OptionError(f"state store option {name}={value!r}: a positive integer "
                                  "is required")
        inline = self.changelog_inline_bytes
        if (not isinstance(inline, int) or isinstance(inline, bool)
                or not 0 <= inline <= MAX_INLINE_CHANGELOG):
            raise OptionError(f"state store option changelog_inline_bytes={inline!r}: an "
                              f"integer from 0 (never inline) to {MAX_INLINE_CHANGELOG} is "
                              "required")
        keep = self.keep_open
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            raise OptionError(f"state store option keep_open={keep!r}: the number of "
                              "partitions a process keeps open between uses, an integer >= 0 "
                              "(0: close at once) is required")
        if self.write_buffer_bytes > self.memtable_budget_bytes:
            raise OptionError(
                f"state store option write_buffer_bytes={self.write_buffer_bytes} is larger "
                f"than memtable_budget_bytes={self.memtable_budget_bytes}: one memtable must "
                "fit in the memtable budget (lower write_buffer_bytes or raise the budget)")
        if self.memtable_budget_bytes > self.block_cache_bytes:
            raise OptionError(
                f"state store option memtable_budget_bytes={self.memtable_budget_bytes} is "
                f"larger than block_cache_bytes={self.block_cache_bytes}: memtables are "
                "charged to the block cache, so the budget must fit in it (raise "
                "block_cache_bytes or lower the budget)")
        for name in ("exact_key_count", "verify_local_cache", "changelog"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"state store option {name}={getattr(self, name)!r}: "
                                  "True or False is required")
        if self.lock_timeout_s < 0:
            raise OptionError(f"state store option lock_timeout_s={self.lock_timeout_s!r}: "
                              "must be >= 0 seconds")
        for name, codec in {"codec": self.codec, **self.space_codecs}.items():
            if not all(hasattr(codec, a) for a in ("encode", "decode", "spec")):
                raise OptionError(f"state codec for {name!r} must have encode/decode/spec, "
                                  f"got {type(codec).__name__}")
        object.__setattr__(self, "space_codecs", dict(self.space_codecs))

    @property
    def memory_bound_bytes(self) -> int:
        """RocksDB memory a worker process may hold for stores with these sizes: the block
        cache (which memtables are charged to) plus the memtable budget as headroom (memtables
        being flushed, compaction buffers, memory the allocator holds). Excludes the Python
        interpreter and values the caller holds. Why one bound per worker, and how it was
        checked: docs/decisions/0015-memory-bound-per-worker.md."""
        return self.block_cache_bytes + self.memtable_budget_bytes

    def codec_for(self, space: str) -> Codec:
        """The codec values of ``space`` are stored with.

        Parameters
        ----------
        space
            The state space's name.

        Returns
        -------
        Codec
            ``space_codecs[space]`` when given, else ``codec``.

        Runs on
        -------
        both"""
        return self.space_codecs.get(space, self.codec)

    def resolved_local_dir(self) -> str:
        """The directory local copies of state go under.

        Returns
        -------
        str
            ``local_dir`` when set, else :func:`default_local_dir` (under Spark's local dir
            when running in an executor, else the temp dir).

        Runs on
        -------
        executor"""
        return self.local_dir or default_local_dir()

    @classmethod
    def from_strings(cls, options: Mapping[str, str]) -> StateStoreOptions:
        """Build options from Spark's string options; names not of a field are ignored.

        Parameters
        ----------
        options
            Option names (case-insensitive) to strings: ``codec`` takes a codec name,
            booleans ``true``/``false``, numbers their text; ``space_codecs`` is not settable.

        Returns
        -------
        StateStoreOptions
            Validated options, defaults for the fields not given.

        Raises
        ------
        OptionError
            An unknown codec name, a boolean or number that does not parse, or a value the
            field's validation refuses.

        Runs on
        -------
        driver"""
        known = {f.name.lower(): f for f in fields(cls) if f.name != "space_codecs"}
        kwargs: dict[str, Any] = {}
        for raw_key, raw in options.items():
            key = raw_key.lower()
            if key not in known:
                continue
            f = known[key]
            if f.name == "codec":
                kwargs["codec"] = codec_by_name(raw)
            elif f.name == "local_dir":
                kwargs["local_dir"] = raw
            elif f.type in ("bool", bool):
                if raw.lower() not in ("true", "false"):
                    raise OptionError(f"option {f.name}={raw!r}: accepted values are true/false")
                kwargs[f.name] = raw.lower() == "true"
            else:
                try:
                    kwargs[f.name] = float(raw) if f.type in ("float", float) else int(raw)
                except ValueError as exc:
                    raise OptionError(f"option {f.name}={raw!r}: a number is required") from exc
        return cls(**kwargs)
