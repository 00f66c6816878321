"""What the ordered user function may return, checked per call (executor side, hot path).

A call returns None or an iterable of rows; a row is a tuple (or list) in ``output_schema``
order or a dict by field name. Anything else is refused, naming the key and the Kafka record,
before the Arrow conversion: a bare tuple of strings such as ``return (key.decode(), "ok")``
would otherwise be read as two rows made of characters and committed scrambled.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from orderedstream.core.errors import UserFunctionError

# Exact types first (one set lookup per row); subclasses (namedtuple, pyspark Row,
# OrderedDict) pass the isinstance check after it.
ROW_TYPES = frozenset({tuple, dict, list})
ROW_BASES = (tuple, dict, list)
# Iterables that are never "rows": iterating them yields characters, bytes or dict keys.
_NOT_ROW_ITERABLES = (str, bytes, bytearray, memoryview, dict)
ACCEPTED = ("return None, or an iterable of rows (a list or generator of tuples in "
            "output_schema order, or of dicts by field name), e.g. return [(key, 'ok')]")


def as_rows(out: Any) -> list[Any] | str:
    """The rows of one call's result, or a sentence saying what is wrong with it.

    A list returned by the function is used as is; another iterable is drained.

    Parameters
    ----------
    out
        What the user function returned (not ``None``).

    Returns
    -------
    list[Any] | str
        The rows; or, when ``out`` is a bare string, bytes or dict, not iterable, or holds an
        item that is not a tuple, list or dict, the problem for :func:`refuse`.

    Raises
    ------
    TypeError
        Raised from inside a generator the function returned.

    Runs on
    -------
    executor"""
    if type(out) is list:
        rows = out
    elif isinstance(out, _NOT_ROW_ITERABLES):
        return f"a bare {type(out).__name__} {short_repr(out)} instead of an iterable of rows"
    else:
        try:
            rows = list(out)
        except TypeError:
            if not hasattr(out, "__iter__"):  # else the TypeError came from inside a generator
                return f"{type(out).__name__} {short_repr(out)}, which is not an iterable of rows"
            raise
    for row in rows:
        if row.__class__ not in ROW_TYPES and not isinstance(row, ROW_BASES):
            what = ("a bare tuple" if isinstance(out, tuple) else
                    f"a {type(out).__name__}")
            return (f"{what} whose item {short_repr(row)} ({type(row).__name__}) is not a row "
                    f"(a tuple, list or dict)")
    return rows


def refuse(problem: str, *, key: Any, where: str) -> UserFunctionError:
    """The error for a call whose result :func:`as_rows` refused.

    Parameters
    ----------
    problem
        The sentence :func:`as_rows` returned.
    key
        The grouping key of the call.
    where
        The Kafka record (or timeout) the call was for.

    Returns
    -------
    UserFunctionError
        To raise; says what is accepted and that nothing of the batch was committed.

    Runs on
    -------
    executor"""
    return UserFunctionError(
        f"the ordered user function returned {problem} for key {short_repr(key)} at {where}: "
        f"{ACCEPTED}. Nothing of this batch was committed")


def to_batch(rows: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    """Checked rows as one Arrow batch of ``schema``.

    Parameters
    ----------
    rows
        At least one row; tuples in schema order or dicts by field name.
    schema
        The stage's ``output_schema``.

    Returns
    -------
    pa.RecordBatch
        The rows.

    Raises
    ------
    UserFunctionError
        Rows of mixed kinds, a dict naming a field the schema lacks, rows of the wrong length
        or a value that does not convert (the field and value named).

    Runs on
    -------
    executor"""
    cause: Exception | None = None
    try:
        first = rows[0]
        if isinstance(first, dict):
            _check_field_names(rows, schema)
        if isinstance(first, (tuple, dict)):
            # Tuples and dicts convert to a struct array in one C++ pass (from_pylist
            # gathers each column in Python first, slower per row). Anything unusual (None
            # rows, rows of mixed kinds, a value that does not fit) takes the paths below,
            # which behave as before and name it.
            try:
                struct = pa.array(rows, type=pa.struct(schema))
                if struct.null_count == 0:
                    return pa.RecordBatch.from_arrays(struct.flatten(), schema=schema)
            except (ValueError, TypeError, pa.ArrowException):
                pass
        dicts = sum(isinstance(row, dict) for row in rows)
        if 0 < dicts < len(rows):  # from_pylist would null the others; zip, take keys
            kinds = sorted({type(row).__name__ for row in rows})
            raise UserFunctionError(
                f"the ordered user function returned rows of mixed kinds ({', '.join(kinds)})"
                f" in one output chunk; output_schema {schema} takes either tuples in schema "
                "order or dicts by field name")
        if dicts:
            return pa.RecordBatch.from_pylist(rows, schema=schema)
        columns = list(zip(*rows, strict=True))
        problem = None if len(columns) == len(schema) else f"rows have {len(columns)} fields"
        if problem is None:
            return pa.RecordBatch.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
                schema=schema)
    except (ValueError, TypeError, pa.ArrowException) as exc:
        problem, cause = _field_problem(rows, schema) or str(exc), exc
    raise UserFunctionError(
        f"the ordered user function returned rows that do not fit output_schema "
        f"({_schema_text(schema)}): {problem}; return tuples in schema order or dicts by "
        "field name") from cause


def _check_field_names(rows: list[Any], schema: pa.Schema) -> None:
    """Dict rows name only fields of ``schema``: a misspelled name would otherwise be
    dropped and its field committed as null."""
    names = frozenset(schema.names)
    if all(map(names.issuperset, rows)):  # the common case, checked in C
        return
    for row in rows:
        if isinstance(row, dict) and not row.keys() <= names:
            unknown = sorted(map(str, set(row) - names))
            raise UserFunctionError(
                f"the ordered user function returned a dict row with field(s) "
                f"{', '.join(repr(u) for u in unknown)} that output_schema "
                f"({_schema_text(schema)}) does not have, in {short_repr(row)}; a dict row names "
                "output_schema's fields (a field left out is null)")


def _field_problem(rows: list[Any], schema: pa.Schema) -> str | None:
    """The first field whose values do not convert to its type, named with the value's
    problem (for the error message; only after a conversion failed)."""
    for index, f in enumerate(schema):
        try:
            values = [row.get(f.name) if isinstance(row, dict) else row[index] for row in rows]
        except (IndexError, TypeError, KeyError):
            return None  # rows of the wrong length: the caller's message says so
        try:
            pa.array(values, type=f.type)
        except (ValueError, TypeError, pa.ArrowException) as exc:
            bad = next((v for v in values if not _fits(v, f.type)), None)
            return (f"field {f.name!r} ({f.type}) got {short_repr(bad)} "
                    f"({type(bad).__name__}): {exc}")
    return None


def _fits(value: Any, type_: pa.DataType) -> bool:
    try:
        pa.array([value], type=type_)
    except (ValueError, TypeError, pa.ArrowException):
        return False
    return True


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (keys and values in error messages).

    Parameters
    ----------
    value
        Anything.
    limit
        The longest text returned, ``...`` included.

    Returns
    -------
    str
        The text.

    Runs on
    -------
    both"""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
