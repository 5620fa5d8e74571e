"""SQLite's declared types as Arrow types: how each column is selected, primed and
converted (the affinity rules of https://sqlite.org/datatype3.html plus the common names
DATE, DATETIME, TIMESTAMP, TIMESTAMPTZ, BOOLEAN, DECIMAL(p,s) and JSON; docs/formats.md).

A column without a declared type (or one SQLite gives NUMERIC affinity that egress
cannot type further) keeps each value's own storage class, as a sparse union
(:data:`DYNAMIC`). Beside ``pg_types.py``, which does the same for PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from egress.exceptions import DataError
from egress.sources.base import SOURCE_TYPE

_DECIMAL = re.compile(r"^\s*(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)\s*$", re.I)
_HAS_OFFSET = r"(?:Z|[+-]\d\d:?\d\d)$"
_DATE_ONLY = r"^\d{4}-\d\d-\d\d$"
#: SQLite's storage classes, in the order of the children of :data:`DYNAMIC`.
_STORAGE_CLASSES = (
    ("integer", pa.int64(), "0"),
    ("real", pa.float64(), "0.0"),
    ("text", pa.string(), "''"),
    ("blob", pa.binary(), "x''"),
)
#: A value of any storage class: one child per class, the row's own class selected.
DYNAMIC = pa.sparse_union([pa.field(n, t) for n, t, _ in _STORAGE_CLASSES])

Convert = Callable[[list[pa.Array], pa.Field], pa.Array]
#: Whole numbers up to this many digits are exact as doubles (below 2**53).
_EXACT_DOUBLE_DIGITS = 15


class MixedStorage(Exception):
    """A batch read with a column's fast selection holds a value of a storage class that
    selection does not take (text, a blob): those rows are read again with the full one."""


def data_error(field: pa.Field, exc: Exception) -> DataError:
    declared = (field.metadata or {}).get(SOURCE_TYPE, b"").decode() or "untyped"
    return DataError(
        f"column {field.name!r}: a value cannot be read as {declared} ({field.type}): {exc}"
    )


def cast_column(arrays: list[pa.Array], field: pa.Field, to: pa.DataType | None = None) -> pa.Array:
    """The column as ``to`` (the field's type by default); text is checked to be UTF-8
    (SQLite hands out a blob stored in a TEXT column as it is)."""
    (col,) = arrays
    to = to or field.type
    try:
        if col.type != to:
            col = pc.cast(col, to)
        if pa.types.is_string(to):
            col.validate(full=True)
        return col
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise data_error(field, exc) from exc


def _numeric(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """Text of non-REAL values, plus REAL values as the shortest text that reads back to
    the same double (SQLite's own CAST keeps only 15 digits). In a DECIMAL(p,s) column a
    REAL is rounded to the declared scale first: 3 * 12.34 is stored as
    37.019999999999996 and means 37.02."""
    text, real = arrays
    if real.null_count < len(real):
        if pa.types.is_decimal(field.type):
            real = pc.round(real, ndigits=field.type.scale)
            if text.null_count == len(text):
                # only REALs: the rounded double converts to the same decimal as its
                # text does, without making the text (checked in tests/unit)
                return cast_column([real], field)
        text = pc.coalesce(text, pc.cast(real, pa.string()))
    return cast_column([text], field)


def _timestamp(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """ISO 8601 text as SQLite's date functions read it: a date alone is midnight, a value
    without an offset is UTC, one with an offset is converted to UTC."""
    (text,) = arrays
    if text.null_count == len(text):
        return pa.nulls(len(text), field.type)
    try:
        # the common case, no value with an offset: one parse, read as UTC (a date alone
        # parses as midnight); a value with an offset makes the naive parse fail
        naive = pc.cast(text, pa.timestamp("us"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    else:
        return naive if naive.type == field.type else naive.cast(field.type)
    date_only = pc.match_substring_regex(text, _DATE_ONLY)
    text = pc.if_else(date_only, pc.binary_join_element_wise(text, " 00:00:00", ""), text)
    has_offset = pc.match_substring_regex(text, _HAS_OFFSET)
    text = pc.if_else(has_offset, text, pc.binary_join_element_wise(text, "Z", ""))
    utc = cast_column([text], field, pa.timestamp("us", tz="UTC"))
    return utc if field.type.tz else pc.cast(utc, pa.timestamp("us"))


def dynamic(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """One sparse union of the four per-class columns (at most one is set per row; a NULL
    is a null integer)."""
    try:
        arrays[2].validate(full=True)  # the text child: SQLite does not check for UTF-8
    except pa.ArrowInvalid as exc:
        raise data_error(field, exc) from exc
    codes = np.zeros(len(arrays[0]), dtype=np.int8)
    for code, array in enumerate(arrays[1:], start=1):
        if array.null_count < len(array):
            codes[pc.is_valid(array).to_numpy(zero_copy_only=False)] = code
    return pa.UnionArray.from_sparse(
        pa.array(codes, pa.int8()), arrays, field_names=[n for n, _, _ in _STORAGE_CLASSES]
    )


@dataclass(frozen=True)
class Mapping:
    """How one declared type is selected, primed and converted."""

    arrow_type: pa.DataType
    #: (SQL expression template, dummy literal) per selected column; {c} is the column.
    selects: tuple[tuple[str, str], ...]
    convert: Convert = cast_column
    logical_type: str | None = None
    #: The Arrow value is the stored value, so it can be bound back as a cursor.
    exact_key: bool = False
    #: A cheaper selection (one SQL expression, its dummy, its converter) for columns
    #: whose values are of the expected storage class, as they are in most tables; its
    #: converter raises MixedStorage on a batch with another. The full selection above
    #: calls typeof() or CAST per value, which costs about a fifth of the whole read of
    #: a typical table (docs/benchmarks.md, session 17).
    fast: tuple[str, str, Convert] | None = None
    #: The storage classes (besides NULL) that the full selection reads, when it is the
    #: bare column: the driver fails a stream on another one past its first rows, with
    #: an error that names no column (``SqliteSource`` then looks for the row). Empty:
    #: every class is read.
    stored: tuple[str, ...] = ()


def _text(arrow_type: pa.DataType, convert: Convert = cast_column, logical: str | None = None
          ) -> Mapping:
    return Mapping(arrow_type, (("CAST({c} AS TEXT)", "''"),), convert, logical)


def _split_real(arrow_type: pa.DataType, logical: str | None = None) -> Mapping:
    selects = (
        ("CASE WHEN typeof({c}) = 'real' THEN NULL ELSE CAST({c} AS TEXT) END", "''"),
        ("CASE WHEN typeof({c}) = 'real' THEN {c} END", "0.0"),
    )
    fast = None
    if (pa.types.is_decimal(arrow_type)
            and arrow_type.precision - arrow_type.scale <= _EXACT_DOUBLE_DIGITS):
        # every INTEGER the column can hold is exact as a double, and one it cannot
        # hold overflows the decimal either way
        fast = ("{c}", "0.0", _fast_decimal)
    return Mapping(arrow_type, selects, _numeric, logical, fast=fast)


def _stored_numbers(arrays: list[pa.Array]) -> pa.Array:
    """The column selected as it is stored, primed as a REAL: the driver reads INTEGER
    and REAL values as doubles, and turns the column into text within its first batch of
    rows if it meets a text (a later one, or a blob, fails the stream instead)."""
    (col,) = arrays
    if not pa.types.is_float64(col.type):
        raise MixedStorage
    return col


def _fast_decimal(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """As :func:`_numeric` makes a batch of only numbers (a REAL rounded to the scale)."""
    real = pc.round(_stored_numbers(arrays), ndigits=field.type.scale)
    return cast_column([real], field)


def _fast_text(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """A TEXT column selected as it is stored: a blob among the driver's first rows makes
    the whole column binary."""
    (col,) = arrays
    if not pa.types.is_string(col.type):
        raise MixedStorage
    return cast_column([col], field)


def _fast_bool(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """Non-zero is true, as the full selection's ``{c} <> 0`` says for numbers."""
    return pc.not_equal(_stored_numbers(arrays), 0.0)


DYNAMIC_MAPPING = Mapping(
    DYNAMIC,
    tuple((f"CASE WHEN typeof({{c}}) = '{cls}' THEN {{c}} END", dummy)
          for cls, _, dummy in _STORAGE_CLASSES),
    dynamic,
    exact_key=True,
)


def map_declared_type(declared: str) -> Mapping:
    """Arrow type and SELECT expressions for a column's declared SQLite type."""
    t = declared.strip().upper()
    if m := _DECIMAL.match(t):
        precision, scale = int(m.group(1)), int(m.group(2) or 0)
        if 0 < precision <= 38 and scale <= precision:
            return _split_real(pa.decimal128(precision, scale))
    if "BOOL" in t:
        # numbers: non-zero is true; texts must read as a boolean ("true", "0", …)
        # always text (0/1 for a number), so that a text or a blob after the driver's
        # first rows cannot fail the stream as a type mismatch
        return Mapping(pa.bool_(), (
            ("CASE WHEN typeof({c}) IN ('integer', 'real') THEN CAST({c} <> 0 AS TEXT) "
             "ELSE CAST({c} AS TEXT) END", "''"),
        ), fast=("{c}", "0.0", _fast_bool))
    if "INT" in t:
        return Mapping(pa.int64(), (("{c}", "0"),), exact_key=True, stored=("integer",))
    if t in ("JSON", "JSONB"):
        return Mapping(pa.string(), (("json({c})", "''"),), logical_type="json")
    if t == "DATE":
        return _text(pa.date32())
    if t in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATETIMETZ"):
        return _text(pa.timestamp("us", tz="UTC"), _timestamp)
    if t.startswith(("DATETIME", "TIMESTAMP")):
        return _text(pa.timestamp("us"), _timestamp)
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        # TEXT affinity (no INT in the name): only texts and blobs are stored, and the
        # driver hands a blob past its first rows over with the bytes CAST would give
        return Mapping(pa.string(), (("CAST({c} AS TEXT)", "''"),),
                       fast=("{c}", "''", _fast_text))
    if "BLOB" in t:
        return Mapping(pa.binary(), (("CAST({c} AS BLOB)", "x''"),))
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return Mapping(pa.float64(), (("{c}", "0.0"),), exact_key=True,
                       stored=("integer", "real"))
    if t.startswith(("DECIMAL", "NUMERIC")):
        # Unconstrained or too wide for decimal128: keep the exact text.
        return _split_real(pa.string(), "decimal")
    # No declared type, or one SQLite gives NUMERIC affinity we cannot type further.
    return DYNAMIC_MAPPING
