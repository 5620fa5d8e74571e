"""What part of a table an export asks for: a column subset and a row filter, checked
against the catalog before anything is stored.

The request form (JSON, per table)::

    {"columns": ["id", "status"],
     "filters": [{"column": "status", "op": "=", "value": "paid"},
                 {"column": "amount", "op": ">=", "value": 10}]}

Names must be columns of the table; operators come from a fixed list; each value must
suit its column's type. Sources bind the values as parameters (never SQL text).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import sys
from typing import Any

import pyarrow as pa

from egress.domain.instants import parse_instant
from egress.domain.predicate import OPERATORS, UNARY, Condition, Predicate, Scalar
from egress.exceptions import ConfigError
from egress.sources.base import Column, TableInfo

#: Most values an ``in`` condition may list, and most conditions per table.
MAX_IN_VALUES = 1000
MAX_CONDITIONS = 32
_FILTERABLE = "integers, decimals, floats, booleans, text, dates and timestamps"
#: The largest finite value of a float of 16, 32 and 64 bits.
_FLOAT_MAX = {16: 65504.0, 32: 3.4028234663852886e38, 64: sys.float_info.max}


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind(column: Column) -> str | None:
    t = column.arrow_type
    if column.logical_type == "json":
        return None
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t) or pa.types.is_decimal(t) or column.logical_type == "decimal":
        return "number"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_union(t):  # SQLite column without a declared type
        return "any"
    return None


def _int_range(t: pa.DataType) -> tuple[int, int]:
    """The smallest and largest value of an Arrow integer type."""
    if pa.types.is_unsigned_integer(t):
        return 0, 2**t.bit_width - 1
    return -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1


def _check_range(column: Column, kind: str, value: Scalar, where: str) -> Scalar:
    """A value the column's type can hold, so that it binds and compares (an integer
    beyond 64 bits cannot even be bound): out of range is the caller's error, now."""
    t = column.arrow_type
    if kind == "integer" and isinstance(value, int):
        low, high = _int_range(t)
        if not low <= value <= high:
            raise ConfigError(
                f"{where}: value {value} is out of range; the column holds integers "
                f"from {low} to {high}"
            )
    elif kind == "any" and isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ConfigError(
            f"{where}: value {value} is out of range; integers go from {-(2**63)} to "
            f"{2**63 - 1} (SQLite's 64-bit integers)"
        )
    elif kind == "number" and pa.types.is_floating(t) and not isinstance(value, bool):
        largest = _FLOAT_MAX[t.bit_width]
        number = decimal.Decimal(value) if isinstance(value, str | int) else value
        if not abs(number) <= largest:
            raise ConfigError(
                f"{where}: value {value} is out of range; the column holds floating-point "
                f"numbers from -{largest:.8g} to {largest:.8g}"
            )
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            return float(value)  # what the column compares it as; beyond 64 bits unbindable
    elif kind == "number" and isinstance(value, int) and not -(2**63) <= value < 2**63:
        # a decimal column compares any number; beyond 64 bits it is bound as exact text
        return str(value)
    return value


def _check_value(column: Column, kind: str, value: Any) -> Scalar:
    where = f"filter on column {column.name!r} ({column.source_type or 'untyped'})"
    if isinstance(value, str) and "\x00" in value:
        raise ConfigError(f"{where}: a value may not contain a NUL character")
    if isinstance(value, str) and not _is_unicode(value):
        raise ConfigError(f"{where}: a value must be valid Unicode text (it holds a lone "
                          "surrogate, \\ud800-\\udfff, not in a pair)")
    ok = False
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, int) and not isinstance(value, bool)
        if isinstance(value, float):
            ok = math.isfinite(value)
        elif isinstance(value, str):
            try:
                ok = decimal.Decimal(value).is_finite()
            except decimal.InvalidOperation:
                ok = False
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "text":
        ok = isinstance(value, str)
    elif kind in ("date", "timestamp"):
        if isinstance(value, str):
            try:
                dt.date.fromisoformat(value) if kind == "date" else parse_instant(value)
                ok = True
            except ValueError:
                ok = False
    elif kind == "any":
        ok = isinstance(value, str | int) and not isinstance(value, bool)
        ok = ok or (isinstance(value, float) and math.isfinite(value))
    if not ok:
        expected = {
            "integer": "an integer", "number": "a number", "boolean": "true or false",
            "text": "a string", "date": "an ISO date string (2024-01-31)",
            "timestamp": "an ISO timestamp string (2024-01-31T12:00:00Z)",
            "any": "a string or a number",
        }[kind]
        raise ConfigError(f"{where}: value {value!r} is not {expected}")
    return _check_range(column, kind, value, where)


def check_condition(table: TableInfo, item: dict[str, Any]) -> Condition:
    by_name = {c.name: c for c in table.columns}
    name, op = item.get("column"), item.get("op")
    if not isinstance(name, str) or name not in by_name:
        raise ConfigError(
            f"filter column {name!r} is not a column of table {table.name!r}; "
            f"columns: {', '.join(by_name)}"
        )
    if op not in OPERATORS:
        raise ConfigError(f"unknown filter operator {op!r}; allowed: {', '.join(OPERATORS)}")
    column = by_name[name]
    kind = _kind(column)
    if kind is None:
        raise ConfigError(
            f"column {name!r} ({column.source_type}) cannot be filtered; "
            f"filters work on {_FILTERABLE}"
        )
    value = item.get("value")
    if op in UNARY:
        if value is not None:
            raise ConfigError(f"filter operator {op!r} takes no value")
        return Condition(name, op)
    if op == "in":
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN_VALUES:
            raise ConfigError(
                f"filter operator 'in' takes a list of 1–{MAX_IN_VALUES} values, got {value!r}"
            )
        return Condition(name, op, tuple(_check_value(column, kind, v) for v in value))
    if value is None:
        raise ConfigError(
            f"filter operator {op!r} needs a value; to match NULL use 'is_null' or 'not_null'"
        )
    return Condition(name, op, _check_value(column, kind, value))


def check_selection(
    table: TableInfo, columns: Any = None, filters: Any = None
) -> tuple[tuple[str, ...] | None, Predicate | None]:
    """The checked (columns, predicate) of one table; ConfigError says what is wrong."""
    names = table.column_names
    picked: tuple[str, ...] | None = None
    if columns is not None:
        if not isinstance(columns, list) or not columns:
            raise ConfigError(f"columns of table {table.name!r} must be a non-empty list")
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise ConfigError(
                f"column(s) {', '.join(map(repr, unknown))} not in table {table.name!r}; "
                f"columns: {', '.join(names)}"
            )
        picked = tuple(dict.fromkeys(columns))
    predicate = None
    if filters:
        if not isinstance(filters, list) or len(filters) > MAX_CONDITIONS:
            raise ConfigError(f"filters must be a list of at most {MAX_CONDITIONS} conditions")
        predicate = Predicate(tuple(
            check_condition(table, f if isinstance(f, dict) else {}) for f in filters
        ))
    return picked, predicate


def selected_schema(table: TableInfo, columns: tuple[str, ...] | None) -> pa.Schema:
    """The output schema of ``table`` restricted to ``columns`` (in their order)."""
    if columns is None:
        return table.schema
    return pa.schema([table.schema.field(name) for name in columns])
