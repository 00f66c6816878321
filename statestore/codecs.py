"""Value codecs: pickle by default, raw bytes, JSON, and a schema-typed one (pyarrow schema).

Every codec describes itself with ``spec()``; manifests store the spec per space so readers
that never saw the writer's code (``spark.read.format("rocksstate")``) decode values.
"""

from __future__ import annotations

import base64
import functools
import json
import pickle
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from orderedstream.core.errors import OptionError, StateValueError
from orderedstream.statestore.base import Codec


class PickleCodec:
    """Any picklable Python value. The default.

    ``protocol``: pickle protocol for writing (default: Python's ``pickle.DEFAULT_PROTOCOL``,
    4 on 3.11; any protocol reads back on every supported Python)."""

    name = "pickle"

    def __init__(self, protocol: int | None = None) -> None:
        self.protocol = pickle.DEFAULT_PROTOCOL if protocol is None else protocol
        """Fixed at construction (the fast encoder below is bound to it)."""
        # C callables in place of the methods below: no Python frame per value, which was
        # most of the store's per-call overhead over plain rocksdict. With the default
        # protocol, ``pickle.dumps`` itself (cheaper than a partial passing protocol=).
        # Subclasses that override a method keep it.
        if type(self).encode is PickleCodec.encode:
            fast_encode: Callable[[Any], bytes] = (
                pickle.dumps if self.protocol == pickle.DEFAULT_PROTOCOL
                else functools.partial(pickle.dumps, protocol=self.protocol))
            self.encode = fast_encode  # type: ignore[method-assign, assignment]
        if type(self).decode is PickleCodec.decode:
            fast_decode: Callable[[bytes], Any] = pickle.loads
            self.decode = fast_decode  # type: ignore[method-assign, assignment]

    def encode(self, value: Any) -> bytes:
        """The pickle of ``value`` (``self.protocol``).

        Parameters
        ----------
        value
            Any picklable value (else pickle's ``PicklingError`` or ``TypeError``).

        Runs on
        -------
        both (where a partition is open)"""
        return pickle.dumps(value, protocol=self.protocol)

    def decode(self, data: bytes) -> Any:
        """The unpickled value (``pickle.loads``: never for bytes from an untrusted source).

        Parameters
        ----------
        data
            Bytes this codec's ``encode`` wrote.

        Runs on
        -------
        both (where a partition is open or state is read)"""
        return pickle.loads(data)

    def spec(self) -> dict[str, Any]:
        """``{"name": ...}``, as stored in manifests for ``codec_from_spec``."""
        return {"name": self.name}


class BytesCodec:
    """Values are bytes already (fastest; no copy or framing)."""

    name = "bytes"

    def encode(self, value: Any) -> bytes:
        """``value`` itself when it is ``bytes``, else a copy as ``bytes``.

        Parameters
        ----------
        value
            The value to store.

        Raises
        ------
        StateValueError
            ``value`` is not bytes, bytearray or memoryview.

        Runs on
        -------
        both (where a partition is open)"""
        if type(value) is bytes:  # immutable already: no copy
            return value
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise StateValueError(f"BytesCodec stores bytes only, got {type(value).__name__}")
        return bytes(value)

    def decode(self, data: bytes) -> Any:
        """``data`` unchanged.

        Parameters
        ----------
        data
            Bytes this codec's ``encode`` wrote.

        Runs on
        -------
        both (where a partition is open or state is read)"""
        return data

    def spec(self) -> dict[str, Any]:
        """``{"name": ...}``, as stored in manifests for ``codec_from_spec``."""
        return {"name": self.name}


class JsonCodec:
    """JSON-able values (dict/list/str/number/bool/None), UTF-8 encoded."""

    name = "json"

    def encode(self, value: Any) -> bytes:
        """Compact JSON of ``value``, UTF-8.

        Parameters
        ----------
        value
            A JSON-able value (else ``TypeError`` or ``ValueError`` from ``json.dumps``).

        Runs on
        -------
        both (where a partition is open)"""
        return json.dumps(value, separators=(",", ":")).encode()

    def decode(self, data: bytes) -> Any:
        """The value parsed from JSON ``data``.

        Parameters
        ----------
        data
            Bytes this codec's ``encode`` wrote.

        Runs on
        -------
        both (where a partition is open or state is read)"""
        return json.loads(data)

    def spec(self) -> dict[str, Any]:
        """``{"name": ...}``, as stored in manifests for ``codec_from_spec``."""
        return {"name": self.name}


class SchemaCodec:
    """Values are dicts following a pyarrow schema (the reader returns them as typed columns).

    Stored as a pickled tuple in schema field order: compact, and any pyarrow-convertible
    Python value (datetime, Decimal, bytes, nested lists) round-trips. A field the schema
    does not have is refused at ``encode`` time, naming the field and the schema; a missing
    field is stored as None (read back as a null).
    """

    name = "schema"

    def __init__(self, schema: pa.Schema) -> None:
        if not isinstance(schema, pa.Schema):
            raise OptionError(f"SchemaCodec needs a pyarrow.Schema, got {type(schema).__name__}")
        self.schema = schema
        self._names = tuple(schema.names)
        self._name_set = frozenset(self._names)

    def encode(self, value: Any) -> bytes:
        """The pickled tuple of ``value``'s fields in schema order (missing ones None).

        Parameters
        ----------
        value
            A mapping of schema field names to values.

        Raises
        ------
        StateValueError
            ``value`` is not a mapping, or has a field the schema does not.

        Runs on
        -------
        both (where a partition is open)"""
        if not isinstance(value, Mapping):
            raise StateValueError(f"SchemaCodec values are mappings with fields "
                                  f"{list(self._names)}, got {type(value).__name__}")
        extra = set(value) - self._name_set
        if extra:
            raise StateValueError(f"fields {sorted(extra)} are not in the state schema "
                                  f"{list(self._names)}")
        return pickle.dumps(tuple(value.get(n) for n in self._names), protocol=5)

    def decode(self, data: bytes) -> Any:
        """The dict of field name to value that ``encode`` stored.

        Parameters
        ----------
        data
            Bytes this codec's ``encode`` wrote.

        Runs on
        -------
        both (where a partition is open or state is read)"""
        return dict(zip(self._names, pickle.loads(data), strict=True))

    def spec(self) -> dict[str, Any]:
        """``{"name": ..., "schema": ...}`` (the schema IPC-serialized, base64), as stored in
        manifests for ``codec_from_spec``."""
        return {"name": self.name,
                "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode()}

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema.serialize().to_pybytes()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(pa.ipc.read_schema(pa.py_buffer(state["schema"])))  # type: ignore[misc]


_SIMPLE: dict[str, Callable[[], Codec]] = {"pickle": PickleCodec, "bytes": BytesCodec,
                                           "json": JsonCodec}


def codec_from_spec(spec: Mapping[str, Any]) -> Codec:
    """Rebuild a codec from its ``spec()`` (as stored in a manifest).

    Parameters
    ----------
    spec
        A codec's ``spec()``: ``name`` and, for ``schema``, the serialized schema.

    Returns
    -------
    Codec
        A new codec equal to the one that wrote the spec.

    Raises
    ------
    OptionError
        The spec names no codec this module knows.

    Runs on
    -------
    both (wherever a manifest is read)"""
    name = spec.get("name")
    if name in _SIMPLE:
        return _SIMPLE[name]()
    if name == "schema":
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(spec["schema"])))
        return SchemaCodec(schema)
    raise OptionError(f"unknown state codec {name!r}; known: {sorted([*_SIMPLE, 'schema'])}")


def codec_by_name(name: str) -> Codec:
    """A parameterless codec by name (``pickle``, ``bytes``, ``json``).

    Parameters
    ----------
    name
        The codec's name, as in a state option.

    Returns
    -------
    Codec
        A new codec of that kind.

    Raises
    ------
    OptionError
        ``name`` is not one of those three (a schema codec needs its schema).

    Runs on
    -------
    both (wherever string options are parsed, ``StateStoreOptions.from_strings``)"""
    if name not in _SIMPLE:
        raise OptionError(f"unknown state codec {name!r}; accepted: {sorted(_SIMPLE)} "
                          "(the schema codec needs a pyarrow schema: SchemaCodec(schema))")
    return _SIMPLE[name]()
