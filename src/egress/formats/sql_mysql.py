"""The MySQL dialect of the SQL dump: loadable with ``mysql db < file.sql``.

Each file starts by fixing what would otherwise depend on the loading session: the
character set (``SET NAMES utf8mb4``), the time zone TIMESTAMP values are written in
(``+00:00``: egress reads them in UTC), and ``NO_BACKSLASH_ESCAPES`` added to the
session's sql_mode, so a string literal only doubles its quotes (the ``mysql`` client
follows the mode when it splits statements). The ``mysql`` client turns CR LF into LF
and stops a statement at a NUL byte, so a string holding a CR or a NUL is written as
hex with its character set: ``_utf8mb4 X'…'``. Binary values are ``X'…'``; booleans
1 and 0; a FLOAT's value is written as the double that holds it exactly (its shortest
float text, such as 3.4028235e38, may exceed FLT_MAX as a double and be refused).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from egress.formats import render

#: Statements at the top of each file, before its CREATE TABLE.
SESSION = (
    "SET NAMES utf8mb4;\n"
    "SET time_zone = '+00:00';\n"
    "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@sql_mode, ''), "
    "'NO_BACKSLASH_ESCAPES', 'NO_AUTO_VALUE_ON_ZERO');\n"
)


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def string_literal(array: pa.Array) -> pa.Array:
    """Each string quoted (``'`` doubled), or as ``_utf8mb4 X'…'`` if it holds a CR or a
    NUL byte."""
    raw = render._value_bytes(array)
    escaped = pc.replace_substring(array, "'", "''") if (raw == 0x27).any() else array
    quoted = pc.binary_join_element_wise("'", escaped, "'", "")
    if not ((raw == 0x0D).any() or (raw == 0x00).any()):
        return quoted
    special = pc.or_(pc.match_substring(array, "\r"),
                     pc.match_substring(array, "\x00")).fill_null(False)
    if not pc.any(special).as_py():
        return quoted  # under null slots only
    hexed = pc.binary_join_element_wise(
        "_utf8mb4 X'", render.hex_strings(pc.filter(array, special)), "'", "")
    return pc.replace_with_mask(quoted, special, hexed)


def literal(array: pa.Array, field: pa.Field) -> pa.Array:
    """Each value as a MySQL literal (nulls stay null)."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return string_literal(array)
    if pa.types.is_boolean(t):
        return pc.if_else(array, "1", "0")
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(array, pa.string())
    if pa.types.is_floating(t):
        # MySQL stores no NaN or infinity
        return render._float_text(array.cast(pa.float64()), "NULL", "NULL", "NULL")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        hexed = render.hex_strings(array)
        return render._with_nulls_of(array, pc.binary_join_element_wise("X'", hexed, "'", ""))
    if pa.types.is_timestamp(t):
        # the wall-clock text (no 'Z': the file's session is in UTC)
        naive = array.view(pa.timestamp(t.unit)) if t.tz else array
        return string_literal(pc.cast(naive, pa.string()))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return string_literal(render._with_nulls_of(array, render.json_value(array, field)))
    if pa.types.is_union(t):
        return render.by_child(array, literal)
    return string_literal(render.as_text(array))
