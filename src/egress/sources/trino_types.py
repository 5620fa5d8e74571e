"""Trino types as Arrow, and the protocol's JSON values as Arrow arrays.

Trino's client protocol sends every value as JSON: numbers for the integer and floating
types (``"NaN"``, ``"Infinity"`` as strings), text for decimal, date, time, timestamp,
uuid and json, base64 for varbinary, and JSON arrays/objects for array, map and row.
Nested types are written as JSON text (logical type ``json``): every format egress
writes can hold them, and no reader has to agree with us on a nested schema.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from egress.sources.base import Column

_SIMPLE: dict[str, pa.DataType] = {
    "bigint": pa.int64(), "integer": pa.int32(), "smallint": pa.int16(),
    "tinyint": pa.int8(), "boolean": pa.bool_(), "real": pa.float32(),
    "double": pa.float64(), "date": pa.date32(), "varbinary": pa.binary(),
}
_PARAMS = re.compile(r"^(?P<base>[a-z ]+?)(?:\((?P<args>[^()]*)\))?(?P<tz> with time zone)?$")
_NESTED = ("array(", "map(", "row(")


def _precision(args: str | None, default: int) -> int:
    return int(args) if args and args.strip().isdigit() else default


def _unit(precision: int) -> str:
    return "s" if precision == 0 else "ms" if precision <= 3 else "us" if precision <= 6 \
        else "ns"


def column(name: str, trino_type: str) -> Column:
    """The column ``name`` of Trino type ``trino_type`` (as the engine spells it)."""
    t = trino_type.strip().lower()
    if t.startswith(_NESTED):
        return Column(name, trino_type, pa.string(), logical_type="json")
    if t in _SIMPLE:
        return Column(name, trino_type, _SIMPLE[t])
    if t == "json":
        return Column(name, trino_type, pa.string(), logical_type="json")
    if t == "uuid":
        return Column(name, trino_type, pa.string(), logical_type="uuid")
    m = _PARAMS.match(t)
    base = m.group("base").strip() if m else t
    args = m.group("args") if m else None
    if base in ("varchar", "char"):
        return Column(name, trino_type, pa.string())
    if base == "decimal":
        p, _, s = (args or "38,0").partition(",")
        precision, scale = int(p), int(s or 0)
        return Column(name, trino_type, pa.decimal128(precision, scale))
    if base == "time":  # time with time zone has an offset Arrow cannot hold: text
        if m and m.group("tz"):
            return Column(name, trino_type, pa.string())
        return Column(name, trino_type, pa.time64("us" if _precision(args, 3) <= 6 else "ns"))
    if base == "timestamp":
        unit = _unit(_precision(args, 3))
        if m and m.group("tz"):
            return Column(name, trino_type, pa.timestamp(unit, tz="UTC"))
        return Column(name, trino_type, pa.timestamp(unit))
    # types this mapping does not know (ipaddress, interval, geometry…) stay readable text
    return Column(name, trino_type, pa.string())


def _float(v: Any) -> float:
    return float(v)  # "NaN", "Infinity", "-Infinity" parse as floats


def _decimal(v: Any) -> decimal.Decimal:
    return decimal.Decimal(v)


def _time(v: str) -> dt.time:
    return dt.time.fromisoformat(_fraction6(v))


def _timestamp(v: str) -> dt.datetime:
    return dt.datetime.fromisoformat(_fraction6(v.replace(" ", "T", 1)))


def _fraction6(text: str) -> str:
    # Python parses at most microseconds: cut digits 7-12 (picoseconds) off
    return re.sub(r"(\.\d{6})\d+", r"\1", text)


def _timestamp_tz(v: str) -> dt.datetime:
    # "2026-11-24 10:15:00.123 UTC", "… +01:00" or "… Europe/Paris"
    stamp, _, zone = v.rpartition(" ")
    value = _timestamp(stamp)
    if zone in ("UTC", "Z"):
        tz: dt.tzinfo = dt.UTC
    elif zone[:1] in "+-":
        tz = dt.datetime.strptime(zone.replace(":", ""), "%z").tzinfo or dt.UTC
    else:
        from zoneinfo import ZoneInfo

        tz = ZoneInfo(zone)
    return value.replace(tzinfo=tz).astimezone(dt.UTC)


def _json_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False,
                                                   separators=(",", ":"))


def _converter(col: Column) -> Callable[[Any], Any] | None:
    """How one JSON value becomes the Python value Arrow builds from (None: as is)."""
    t = col.source_type.strip().lower()
    arrow = col.arrow_type
    if col.logical_type == "json" and t != "json":
        return _json_text
    if pa.types.is_floating(arrow):
        return _float
    if pa.types.is_decimal(arrow):
        return _decimal
    if pa.types.is_binary(arrow):
        return base64.b64decode
    if pa.types.is_time(arrow):
        return _time
    if pa.types.is_timestamp(arrow):
        return _timestamp_tz if arrow.tz else _timestamp
    if pa.types.is_date(arrow):
        return dt.date.fromisoformat
    return None


def to_batch(columns: list[Column], rows: list[list[Any]],
             extra: dict[str, pa.Array] | None = None) -> pa.RecordBatch:
    """The protocol's ``data`` rows as one record batch of ``columns`` (plus ``extra``)."""
    arrays: list[pa.Array] = []
    for i, col in enumerate(columns):
        convert = _converter(col)
        values = [row[i] for row in rows]
        if convert is not None:
            values = [None if v is None else convert(v) for v in values]
        arrays.append(pa.array(values, type=col.arrow_type))
    names = [c.name for c in columns]
    fields = [c.field() for c in columns]
    for name, array in (extra or {}).items():
        names.append(name)
        arrays.append(array)
        fields.append(pa.field(name, array.type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
