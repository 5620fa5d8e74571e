"""Vectorised rendering of Arrow columns as text, shared by the CSV, JSON and SQL formats.

Every function takes a whole column and returns a string column computed by Arrow's C++
kernels: no Python object per row on the hot path (binary columns in JSON are the one
exception, base64 has no Arrow kernel). Nulls stay null; each format decides how a
null is written.

Representations (documented in docs/formats.md):
- floats: shortest text that reads back to the same double; non-finite as NaN/Infinity/-Infinity
- decimals: exact, with the column's scale; timestamps: ``YYYY-MM-DD HH:MM:SS.ffffff`` (+``Z``
  when the column has a time zone, always UTC); dates ``YYYY-MM-DD``
- binary: ``\\x`` + lowercase hex in CSV, base64 in JSON, a blob literal in SQL
- a sparse union (a SQLite column without a declared type, whose values keep their own
  storage class): each value as its own child type renders it
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from egress.formats.base import value_offsets
from egress.sources.base import LOGICAL_TYPE

_HEX = np.frombuffer(b"".join(f"{i:02x}".encode() for i in range(256)), dtype=np.uint8).reshape(
    256, 2
)


def logical_type(field: pa.Field) -> str | None:
    meta = field.metadata or {}
    value = meta.get(LOGICAL_TYPE)
    return value.decode() if value else None


def hex_strings(array: pa.Array) -> pa.Array:
    """Lowercase hex of each binary value, vectorised with numpy (nulls become "")."""
    array = pc.cast(array, pa.binary())
    offsets = value_offsets(array)
    data = np.frombuffer(array.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    hexed = _HEX[data].reshape(-1)
    new_offsets = ((offsets - offsets[0]) * 2).astype(np.int32)
    return pa.StringArray.from_buffers(
        len(array), pa.py_buffer(new_offsets), pa.py_buffer(hexed.tobytes())
    )


def _float_text(array: pa.Array, nan: str, inf: str, neg_inf: str) -> pa.Array:
    text = pc.cast(array, pa.string())
    if not pc.any(pc.invert(pc.is_finite(array))).as_py():
        return text
    text = pc.if_else(pc.is_nan(array), nan, text)
    text = pc.if_else(pc.equal(array, float("inf")), inf, text)
    return pc.if_else(pc.equal(array, float("-inf")), neg_inf, text)


def _with_nulls_of(array: pa.Array, text: pa.Array) -> pa.Array:
    """``text`` with the nulls of ``array`` (kernels like if_else may drop them)."""
    if array.null_count == 0:
        return text
    return pc.if_else(pc.is_null(array), pa.scalar(None, pa.string()), text)


def union_codes(array: pa.Array) -> pa.Array:
    """The type code of each row of a union (``UnionArray.type_codes`` ignores a slice's
    offset)."""
    return pa.Array.from_buffers(
        pa.int8(), len(array), [None, array.buffers()[1]], offset=array.offset
    )


def by_child(array: pa.Array, render: Callable[[pa.Array, pa.Field], pa.Array]) -> pa.Array:
    """Render each child of a sparse union; each row takes the text of its own child."""
    codes = union_codes(array)
    out = pa.nulls(len(array), pa.string())
    for i, code in enumerate(array.type.type_codes):
        rendered = render(array.field(i), array.type.field(i))
        out = pc.if_else(pc.equal(codes, code), rendered, out)
    return out


def _list_join(array: pa.Array, elements: pa.Array, sep: str) -> pa.Array:
    """Join the rendered ``elements`` of each list of ``array`` with ``sep``."""
    offsets = pc.subtract(array.offsets, array.offsets[0])
    lists = pa.ListArray.from_arrays(offsets, elements, mask=pc.is_null(array))
    return pc.binary_join(lists, sep)


# --- plain text (CSV) -------------------------------------------------------------------


def as_text(array: pa.Array) -> pa.Array:
    """Arrow's text of each value. A UTC timestamp is cast through its naive twin and
    given a ``Z``: the same text, about nine times faster than the zoned cast."""
    t = array.type
    if pa.types.is_timestamp(t) and t.tz == "UTC":
        naive = array.view(pa.timestamp(t.unit))
        return pc.binary_join_element_wise(pc.cast(naive, pa.string()), "Z", "")
    return pc.cast(array, pa.string())


def text(array: pa.Array, field: pa.Field) -> pa.Array:
    """The plain text of each value, as CSV writes it."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return array
    if pa.types.is_floating(t):
        return _float_text(array, "NaN", "Infinity", "-Infinity")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _with_nulls_of(array, pc.binary_join_element_wise("\\x", hex_strings(array), ""))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return json_value(array, field)
    if pa.types.is_union(t):
        return by_child(array, text)
    return as_text(array)


# --- JSON -------------------------------------------------------------------------------

#: The two-character escapes of JSON; every other control character is written ``\\u00XX``.
_JSON_SHORT = {0x5C: "\\\\", 0x22: '\\"', 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def _value_bytes(array: pa.Array) -> np.ndarray:
    """The bytes of a string array's values, back to back (no copy). Bytes under null
    slots are included: a scan of them can only find a needless pass."""
    data = array.buffers()[2] if len(array) else None
    if data is None:
        return np.zeros(0, dtype=np.uint8)
    offsets = value_offsets(array)
    return np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]]


def _escapable_bytes(array: pa.Array) -> list[int]:
    """The bytes of ``array``'s values that JSON must escape (a quote, a backslash, a
    control character), found with three vectorised scans of its data buffer instead of
    a regex per value."""
    raw = _value_bytes(array)
    if not len(raw):
        return []
    found = [b for b in (0x5C, 0x22) if (raw == b).any()]
    low = raw < 0x20
    if low.any():
        found += np.unique(raw[low]).tolist()
    return found


def json_string(array: pa.Array, plain: bool = False) -> pa.Array:
    """Each string as a JSON string literal (quoted and escaped). ``plain``: the caller
    knows no value holds a quote, a backslash or a control character. The backslash is
    escaped first so that the escapes added later are not escaped again; only the
    characters present cost a pass."""
    out = array
    if not plain:
        for byte in _escapable_bytes(array):  # 0x5C first when present
            replacement = _JSON_SHORT.get(byte, f"\\u{byte:04x}")
            out = pc.replace_substring(out, chr(byte), replacement)
    return pc.binary_join_element_wise('"', out, '"', "")


def json_value(array: pa.Array, field: pa.Field) -> pa.Array:
    """Each value as a JSON token (nulls stay null)."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return array if logical_type(field) == "json" else json_string(array)
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        return pc.cast(array, pa.string())
    if pa.types.is_floating(t):
        text = _float_text(array, '"NaN"', '"Infinity"', '"-Infinity"')
        # many JSON readers (Python's among them) read -0 as the integer 0: keep the sign
        return pc.if_else(pc.equal(text, "-0"), "-0.0", text)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        values = [None if v is None else base64.b64encode(v).decode() for v in array.to_pylist()]
        return json_string(pa.array(values, pa.string()))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element_field = t.value_field
        elements = json_value(array.flatten(), element_field).fill_null("null")
        return _with_nulls_of(
            array, pc.binary_join_element_wise("[", _list_join(array, elements, ","), "]", "")
        )
    if pa.types.is_union(t):
        return by_child(array, json_value)
    # decimals, dates, times, timestamps: exact text as a JSON string (digits and -:.TZ)
    plain = pa.types.is_decimal(t) or pa.types.is_temporal(t)
    return json_string(as_text(array), plain=plain)


# --- SQL literals -----------------------------------------------------------------------


def sql_string(array: pa.Array, dialect: str) -> pa.Array:
    """Each string as a quoted literal. In SQLite a text holding a CR is written as
    ``CAST(X'…' AS TEXT)``: the sqlite3 shell drops a CR that ends a line, even inside a
    literal (and ``'…'||char(13)||'…'`` nests one level per CR, past SQLite's limit).
    A byte scan of the values first tells whether any quote or CR occurs at all, and
    only the values with a CR are hexed."""
    raw = _value_bytes(array)
    escaped = pc.replace_substring(array, "'", "''") if (raw == 0x27).any() else array
    quoted = pc.binary_join_element_wise("'", escaped, "'", "")
    if dialect != "sqlite" or not (raw == 0x0D).any():
        return quoted
    has_cr = pc.match_substring(array, "\r").fill_null(False)
    if not pc.any(has_cr).as_py():
        return quoted  # the CRs were under null slots
    with_cr = pc.filter(array, has_cr)
    hexed = pc.binary_join_element_wise("CAST(X'", hex_strings(with_cr), "' AS TEXT)", "")
    return pc.replace_with_mask(quoted, has_cr, hexed)


def sql_literal(array: pa.Array, field: pa.Field, dialect: str) -> pa.Array:
    """Each value as a SQL literal of ``dialect`` (nulls stay null)."""
    t = array.type
    # DuckDB reads PostgreSQL's literals (TRUE, quoted floats, ARRAY[…]::type) but
    # not its bytea text: its blobs are from_hex('…'), and JSON text that fills a
    # STRUCT, MAP or UNION column is cast to JSON first (a plain string is not)
    duckdb = dialect == "duckdb"
    postgres = dialect == "postgresql" or duckdb
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        quoted = sql_string(array, dialect)
        if duckdb and logical_type(field) == "json":
            return _with_nulls_of(array, pc.binary_join_element_wise(quoted, "::JSON", ""))
        return quoted
    if pa.types.is_boolean(t):
        return pc.if_else(array, "TRUE", "FALSE") if postgres else pc.if_else(array, "1", "0")
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(array, pa.string())
    if pa.types.is_floating(t):
        if postgres:
            # Quoted, so float4in/float8in read the text itself: an unquoted 1.5 is a
            # NUMERIC first, which drops the sign of -0 and makes ARRAY[...] numeric[].
            text = _float_text(array, "NaN", "Infinity", "-Infinity")
            return pc.binary_join_element_wise("'", text, "'", "")
        # SQLite stores no NaN (it becomes NULL); 9e999 reads back as an infinity.
        text = _float_text(array, "NULL", "9e999", "-9e999")
        return text
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        hexed = hex_strings(array)
        if duckdb:
            return _with_nulls_of(array, pc.binary_join_element_wise("from_hex('", hexed, "')",
                                                                     ""))
        if postgres:
            return _with_nulls_of(array, pc.binary_join_element_wise("'\\x", hexed, "'", ""))
        return _with_nulls_of(array, pc.binary_join_element_wise("X'", hexed, "'", ""))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        elements = sql_literal(array.flatten(), t.value_field, dialect).fill_null("NULL")
        source_type = ((field.metadata or {}).get(b"egress.source_type") or b"").decode()
        cast = f"::{source_type}" if postgres and source_type else ""
        return _with_nulls_of(
            array,
            pc.binary_join_element_wise("ARRAY[", _list_join(array, elements, ","), f"]{cast}", ""),
        )
    if pa.types.is_union(t):
        return by_child(array, lambda child, f: sql_literal(child, f, dialect))
    return sql_string(as_text(array), dialect)
