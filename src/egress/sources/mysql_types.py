"""How each MySQL / MariaDB column type is selected and which Arrow type it becomes.

The source reads MySQL's text protocol with PyMySQL's value converters switched off, so
each value arrives as the text the server wrote (``str``) or, for binary columns, as raw
``bytes``; this module turns a column of them into an Arrow array with vectorised casts.
Nothing goes through Python's float or datetime types, so no value is rounded on the way:

- integers of every width, signed and unsigned, become Arrow integers of that width
  (``BIGINT UNSIGNED`` → uint64); ``TINYINT(1)`` (``BOOLEAN``) becomes a boolean, and a
  value other than 0 or 1 in it is a DataError;
- ``DECIMAL(p,s)`` becomes ``decimal128(p,s)`` (p ≤ 38), or text with the logical type
  ``decimal`` above (MySQL allows 65 digits), exactly as the server wrote it;
- ``FLOAT`` is selected as ``CAST(c AS DOUBLE)``: MySQL prints a FLOAT with 6 significant
  digits, which loses bits; the double holds the float's value exactly;
- ``BIT(1)`` becomes a boolean, ``BIT(n)`` an uint64 (the server sends big-endian bytes);
- ``DATE``, ``DATETIME(n)`` (naive) and ``TIMESTAMP(n)`` (UTC: the session's time zone is
  ``+00:00``) become date32 and timestamp[us]; zero dates (``0000-00-00``, ``2024-00-10``)
  cannot be Arrow dates and are a DataError naming the column and the row's key;
- ``TIME`` is a duration (−838:59:59 to 838:59:59), not a time of day: it stays text
  as the server writes it (``-01:30:00.500000``);
- ``YEAR`` → uint16; ``ENUM``, ``SET`` (``a,b``), ``CHAR``/``VARCHAR``/``TEXT`` → string;
- ``JSON`` → string with the logical type ``json`` (MariaDB's JSON is ``LONGTEXT`` with a
  ``json_valid`` check: recognised by it); raw line breaks (whitespace between tokens)
  become spaces so a JSON Lines row stays one line;
- ``BINARY``/``VARBINARY``/``BLOB`` and spatial types → binary; anything else → the
  server's text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_INTEGERS = {
    "tinyint": (pa.int8(), pa.uint8()),
    "smallint": (pa.int16(), pa.uint16()),
    "mediumint": (pa.int32(), pa.uint32()),
    "int": (pa.int32(), pa.uint32()),
    "integer": (pa.int32(), pa.uint32()),
    "bigint": (pa.int64(), pa.uint64()),
}
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
                     "geometry", "point", "linestring", "polygon", "multipoint",
                     "multilinestring", "multipolygon", "geometrycollection"})
#: A zero date or a date with a zero month or day, as MySQL prints them.
_ZERO_DATE = re.compile(r"^(0000-\d\d-\d\d|\d{4}-00-\d\d|\d{4}-\d\d-00)")


@dataclass(frozen=True)
class MyMapping:
    """How one column is selected and converted."""

    arrow_type: pa.DataType
    #: How the raw values are made into ``arrow_type``: ``cast`` (from text), ``text``,
    #: ``binary``, ``bool`` (0/1 text), ``bit`` (big-endian bytes), ``json``, ``date``.
    convert: str = "cast"
    #: SQL of the selected value; ``{c}`` is the qualified, quoted column.
    select: str = "{c}"
    logical_type: str | None = None
    #: SQL that a bound cursor value of this column is wrapped in (``%s`` is the value).
    key_bind: str = "%s"
    #: Why the column cannot order a keyset (None: it can).
    not_a_key: str | None = None


def map_type(data_type: str, column_type: str, precision: int | None, scale: int | None,
             is_json: bool = False) -> MyMapping:
    """The mapping of a column from information_schema's DATA_TYPE and COLUMN_TYPE."""
    data_type, column_type = data_type.lower(), column_type.lower()
    unsigned = "unsigned" in column_type
    if data_type in _INTEGERS:
        if data_type == "tinyint" and column_type.startswith("tinyint(1)") and not unsigned:
            return MyMapping(pa.bool_(), "bool")
        return MyMapping(_INTEGERS[data_type][unsigned])
    if data_type == "decimal":
        p, s = precision or 10, scale or 0
        if p <= 38:
            return MyMapping(pa.decimal128(p, s))
        return MyMapping(pa.string(), "text", logical_type="decimal",
                         key_bind=f"CAST(%s AS DECIMAL({p},{s}))")
    if data_type == "float":
        return MyMapping(pa.float32(), select="CAST({c} AS DOUBLE)")
    if data_type in ("double", "real"):
        return MyMapping(pa.float64())
    if data_type == "bit":
        return MyMapping(pa.bool_() if precision == 1 else pa.uint64(), "bit")
    if data_type == "date":
        return MyMapping(pa.date32(), "date")
    if data_type == "datetime":
        return MyMapping(pa.timestamp("us"), "date")
    if data_type == "timestamp":
        return MyMapping(pa.timestamp("us", tz="UTC"), "date")
    if data_type == "time":
        return MyMapping(pa.string(), "text", key_bind="CAST(%s AS TIME(6))")
    if data_type == "year":
        return MyMapping(pa.uint16())
    if data_type == "json" or is_json:
        return MyMapping(pa.string(), "json", logical_type="json",
                         not_a_key="JSON values have no order egress can page by")
    if data_type in ("enum", "set"):
        return MyMapping(pa.string(), "text", not_a_key=(
            f"an {data_type.upper()} sorts by its position in the declaration but compares "
            "with a bound value as text, so a keyset over it would skip or repeat rows"))
    if data_type in _BINARY:
        return MyMapping(pa.binary(), "binary")
    return MyMapping(pa.string(), "text")


class BadValue(Exception):
    """A value at ``index`` of a column that its Arrow type cannot hold; ``reason`` says
    why in words for the user."""

    def __init__(self, index: int, value: Any, reason: str) -> None:
        super().__init__(reason)
        self.index, self.value, self.reason = index, value, reason


def convert(values: Sequence[Any], mapping: MyMapping) -> pa.Array:
    """A column of raw values (text, bytes or None) as ``mapping.arrow_type``."""
    how, target = mapping.convert, mapping.arrow_type
    if how == "binary":
        return pa.array(values, pa.binary())
    if how == "bit":
        ints = pa.array([None if v is None else int.from_bytes(v, "big") for v in values],
                        pa.uint64())
        return pc.not_equal(ints, 0) if pa.types.is_boolean(target) else ints
    text = pa.array(values, pa.string())
    if how == "text":
        return text
    if how == "json":
        for ch in ("\r", "\n"):  # only whitespace between tokens: strings escape them
            if pc.any(pc.match_substring(text, ch)).as_py():
                text = pc.replace_substring(text, ch, " ")
        return text
    if how == "bool":
        ok = pc.is_in(text, pa.array(["0", "1"]))
        if not pc.all(pc.or_(ok, pc.is_null(text))).as_py():
            index = _first_false(pc.or_(ok, pc.is_null(text)))
            raise BadValue(index, values[index], (
                f"holds {values[index]}, but TINYINT(1) is read as a boolean (0 or 1); "
                "declare the column TINYINT (without the (1)) to export it as a number"))
        return pc.equal(text, "1")
    # a TIMESTAMP's text is the session's wall clock, UTC: read naive, then labelled UTC
    naive = pa.timestamp(target.unit) if pa.types.is_timestamp(target) else target
    try:
        return pc.cast(pc.cast(text, naive), target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    index = _first_bad(values, naive)
    value = values[index]
    if how == "date" and isinstance(value, str) and _ZERO_DATE.match(value):
        raise BadValue(index, value, (
            f"holds the zero date {value!r} (a zero year, month or day, which MySQL accepts "
            "when sql_mode lacks NO_ZERO_DATE / NO_ZERO_IN_DATE), which an Arrow "
            "date or timestamp cannot hold; set such values to NULL or to a real date, or "
            "leave those rows out with a filter"))
    raise BadValue(index, value, f"holds {value!r}, which cannot be read as {target}")


def _first_false(mask: pa.Array) -> int:
    return int(pc.index(mask, False).as_py())


def _first_bad(values: Sequence[Any], target: pa.DataType) -> int:
    for i, value in enumerate(values):
        if value is None:
            continue
        try:
            pc.cast(pa.array([value], pa.string()), target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return i
    return 0
