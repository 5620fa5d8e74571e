"""How each DuckDB column type is selected and which Arrow type it becomes.

DuckDB hands its results to Arrow natively for most types. Where its Arrow form would
lose or misstate a value, the column is selected as DuckDB's own text instead:
HUGEINT and UHUGEINT (exported as ``decimal128(38,0)``, which cannot hold 39 digits and
wraps UHUGEINT's upper half to negatives; read as text and cast to ``decimal256(39,0)``),
TIME WITH TIME ZONE (Arrow's time drops the offset), INTERVAL (no Parquet or text form
in Arrow), BIT (its internal bytes), BIGNUM and every type not named here. STRUCT, MAP,
UNION, fixed-size ARRAY and nested LIST values are selected as ``to_json(col)``: JSON
text (logical type ``json``) that every format can carry. The mapping is documented in
docs/formats.md; beside ``pg_types.py``, which does the same for PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.keys import KeyValue
from egress.exceptions import DataError

_NATIVE: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "BLOB": pa.binary(),
    "UUID": pa.string(),
    "DATE": pa.date32(),
    "TIME": pa.time64("us"),
    "TIMESTAMP": pa.timestamp("us"),
    # seconds and milliseconds widened to microseconds: the one timestamp text of every
    # format, and Parquet has no seconds unit
    "TIMESTAMP_S": pa.timestamp("us"),
    "TIMESTAMP_MS": pa.timestamp("us"),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
}
#: Element types of a LIST that stays an Arrow list of the element's own type.
_LIST_ELEMENTS = ("BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT",
                  "USMALLINT", "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "VARCHAR")
_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")
_NESTED = ("STRUCT(", "MAP(", "UNION(")
#: DuckDB's ±infinity dates and timestamps as Arrow receives them, and 24:00:00.
_DATE_INFINITY = 2**31 - 1
_TIMESTAMP_INFINITY = 2**63 - 1
_DAY_US = 86_400_000_000
_STRING = pa.string()


@dataclass(frozen=True)
class DuckMapping:
    """How one column is selected and what Arrow type it becomes."""

    arrow_type: pa.DataType
    #: SQL expression of the selected value; ``{c}`` is the quoted column.
    select: str = "{c}"
    logical_type: str | None = None
    #: Whether the column can be part of a key (nested values cannot).
    keyable: bool = True
    #: A key column whose Arrow value does not read back exactly carries its cursor in a
    #: hidden column: its SQL and Arrow type (None: the output value is the cursor).
    key_select: str | None = None
    key_arrow: pa.DataType = _STRING
    #: The key's SQL in ORDER BY and in the cursor comparison, and the type its cursor
    #: parameter is cast to (None: the column's declared type).
    key_sql: str = "{c}"
    key_cast: str | None = None


def _text(logical: str | None = None) -> DuckMapping:
    return DuckMapping(pa.string(), "CAST({c} AS VARCHAR)", logical)


def _is_nested(data_type: str) -> bool:
    return data_type.startswith(_NESTED) or data_type.endswith("]")


def map_type(data_type: str) -> DuckMapping:
    """The mapping of a column whose type DuckDB spells ``data_type``
    (``duckdb_columns().data_type``: ``DECIMAL(12,3)``, ``INTEGER[]``, ``ENUM('a', 'b')``)."""
    t = data_type.strip()
    if t.startswith("ENUM(") and t.endswith(")"):
        # a dictionary in Arrow, made plain text. A key pages by the label's position
        # (the enum's order, which ORDER BY uses): a cast of the label to an ENUM(...)
        # spelled out would be another type, compared with the column as text.
        return DuckMapping(pa.string(), key_select="enum_code({c})", key_arrow=pa.int64(),
                           key_sql="enum_code({c})", key_cast="BIGINT")
    if t.endswith("[]") and not _is_nested(t[:-2]):
        element = t[:-2]
        if element in _LIST_ELEMENTS:
            return DuckMapping(pa.list_(_NATIVE[element]), keyable=False)
        return DuckMapping(pa.list_(pa.string()), "CAST({c} AS VARCHAR[])", keyable=False)
    if _is_nested(t):
        return DuckMapping(pa.string(), "to_json({c})", "json", keyable=False)
    if t in _NATIVE:
        return DuckMapping(_NATIVE[t])
    if m := _DECIMAL.match(t):
        return DuckMapping(pa.decimal128(int(m.group(1)), int(m.group(2))))
    if t in ("HUGEINT", "UHUGEINT"):
        return DuckMapping(pa.decimal256(39, 0), "CAST({c} AS VARCHAR)")
    if t == "TIMESTAMP_NS":
        # nanoseconds: Python's datetime cannot hold the cursor, DuckDB's text can
        return DuckMapping(pa.timestamp("ns"), key_select="CAST({c} AS VARCHAR)")
    if t == "JSON":
        # the text as stored; a line break in valid JSON is whitespace between tokens,
        # written as a space so that JSON Lines keeps one row per line
        return DuckMapping(pa.string(), "replace(replace({c}, chr(13), ' '), chr(10), ' ')",
                           "json", key_select="CAST({c} AS VARCHAR)")
    if t in ("BIGNUM", "VARINT"):
        return _text("decimal")
    # INTERVAL, TIME WITH TIME ZONE, BIT, TIME_NS, and any other type: DuckDB's own text
    return _text()


def conform(array: pa.Array, field: pa.Field, source_type: str) -> pa.Array:
    """``array`` as DuckDB returned it, cast to ``field``'s type; values Arrow cannot
    hold (±infinity dates and timestamps, 24:00:00) raise DataError."""
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    target = field.type
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_date(array.type) or pa.types.is_timestamp(array.type):
        _check_finite(array, field, source_type)
    elif pa.types.is_time(array.type):
        late = pc.greater_equal(array.cast(pa.int64()), _DAY_US)
        if pc.any(late).as_py():
            raise DataError(
                f"column {field.name!r} ({source_type}) holds 24:00:00, which an Arrow "
                "time of day cannot hold; store it as 00:00:00 or change the column to VARCHAR"
            )
    if array.type.equals(target):
        return array
    try:
        return pc.cast(array, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(
            f"column {field.name!r}: a value cannot be read as {source_type} ({target}): {exc}"
        ) from exc


def _check_finite(array: pa.Array, field: pa.Field, source_type: str) -> None:
    if pa.types.is_date(array.type):
        values, infinity = array.cast(pa.int32()), _DATE_INFINITY
    else:
        values, infinity = array.cast(pa.int64()), _TIMESTAMP_INFINITY
    if pc.any(pc.greater_equal(pc.abs(values), infinity)).as_py():
        raise DataError(
            f"column {field.name!r} ({source_type}) holds 'infinity' or '-infinity', "
            "which Arrow dates and timestamps cannot hold; replace it with a finite value "
            "or NULL, or change the column to VARCHAR"
        )


def key_param(value: KeyValue) -> KeyValue:
    """A cursor value as the parameter of ``CAST(? AS <key type>)``: numbers as their
    exact text (a HUGEINT's 39 digits, a float's shortest round-trip text), temporal
    values in ISO 8601, everything else as it is."""
    if isinstance(value, bool | bytes | str):
        return value
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.date | dt.time):  # datetime too
        return value.isoformat()
    raise DataError(f"cannot use a value of type {type(value).__name__} as a DuckDB key")
