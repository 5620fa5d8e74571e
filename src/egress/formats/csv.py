"""CSV as RFC 4180 says: CRLF line ends, a header row, fields quoted only when needed.

A NULL is an empty field and an empty string is ``""``, so the two stay apart (as in
PostgreSQL's COPY … CSV).

The ``postgres`` dialect (``csv_dialect="postgres"``) is PostgreSQL's own CSV: a
PostgreSQL source writes the rows itself (``COPY … TO STDOUT (FORMAT csv)``) and egress
only cuts the stream into parts (engine/copied.py); this class then writes the header,
LF-terminated as the server writes its rows. Its encoder (egress's CSV) only sizes parts
when a task is planned.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from egress.exceptions import ConfigError
from egress.formats import render
from egress.formats.base import TextFormat, TextPartEncoder, concat_strings

EOL = "\r\n"
#: CSV dialects: egress's own (RFC 4180), or the text a PostgreSQL server writes.
DIALECTS = ("egress", "postgres")
#: Every character the text of a number, date, time, boolean or binary value may hold.
_PLAIN_TEXT = frozenset("0123456789abcdef+-.:eETZ \\xInfinityNaNtruefalse")


class CsvFormat(TextFormat):
    name = "csv"
    extension = "csv"

    def __init__(self, delimiter: str = ",", csv_dialect: str = "egress") -> None:
        if len(delimiter) != 1 or delimiter in '"\r\n':
            raise ConfigError(
                f"CSV delimiter must be one character other than a quote or a line break, "
                f"got {delimiter!r}"
            )
        if csv_dialect not in DIALECTS:
            raise ConfigError(f"unknown CSV dialect {csv_dialect!r}; known: "
                              f"{', '.join(DIALECTS)}")
        if csv_dialect == "postgres" and (delimiter == "\\" or not delimiter.isascii()):
            raise ConfigError("the postgres CSV dialect needs a one-byte delimiter other "
                              f"than a backslash, got {delimiter!r}")
        self.delimiter = delimiter
        self.csv_dialect = csv_dialect
        #: the source writes the rows (PostgreSQL's COPY); egress writes only the header
        self.server_rows = csv_dialect == "postgres"
        self._needs_quotes = "[" + re.escape(delimiter) + '"\r\n]'
        # the text of numbers, dates, times, booleans and binary is made of these alone
        self._plain_safe = delimiter not in _PLAIN_TEXT

    def _may_need_quotes(self, t: pa.DataType) -> bool:
        plain = (
            pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            or pa.types.is_boolean(t) or pa.types.is_temporal(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
        )
        return not (plain and self._plain_safe)

    def _field(
        self, values: pa.Array, may_need_quotes: bool = True, keep_nulls: bool = False
    ) -> pa.Array:
        """Each value as a CSV field: quoted only if it holds the delimiter, a quote or a
        line break; NULL as an empty field (or kept null with ``keep_nulls``)."""
        if may_need_quotes:
            needs = pc.match_substring_regex(values, self._needs_quotes)
            if pc.any(needs).as_py():
                escaped = pc.replace_substring(values, '"', '""')
                quoted = pc.binary_join_element_wise('"', escaped, '"', "")
                values = pc.if_else(needs, quoted, values)
        return values.fill_null("") if values.null_count and not keep_nulls else values

    def header(self, schema: pa.Schema) -> bytes:
        names = pa.array([f.name for f in schema], pa.string())
        fields = self._field(names).to_pylist()
        # PostgreSQL ends its lines with LF: the header of its dialect too
        eol = "\n" if self.server_rows else EOL
        return (self.delimiter.join(fields) + eol).encode()

    def encode_rows(self, batch: pa.RecordBatch) -> bytes | memoryview:
        # one join builds every line: fields, delimiters and the line end, with a NULL
        # written as an empty field by the join itself (no copy of a column to fill it)
        pieces: list[pa.Array | str] = []
        for field, array in zip(batch.schema, batch.columns, strict=True):
            text = render.text(array, field)
            values = self._field(text, self._may_need_quotes(array.type), keep_nulls=True)
            if _may_be_empty(array.type):
                # an empty string is written "" so that it differs from NULL (an empty field)
                empty = pc.equal(text, "").fill_null(False)
                if pc.any(empty).as_py():
                    values = pc.if_else(empty, '""', values)
            pieces += (values, self.delimiter)
        if not pieces:
            return EOL.encode() * batch.num_rows
        pieces[-1] = EOL
        lines = pc.binary_join_element_wise(*pieces, "", null_handling="replace",
                                            null_replacement="")
        return concat_strings(lines)

    def part_encoder(self, schema: pa.Schema, rows_before: int, offset: int = 0) -> _CsvPart:
        return _CsvPart(self)

    def footer(
        self, schema: pa.Schema, rows_in_file: int, metas: Sequence[bytes] = ()
    ) -> bytes:
        return b""


def _may_be_empty(t: pa.DataType) -> bool:
    """Whether a value of type ``t`` can render as an empty string."""
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_union(t)


class _CsvPart(TextPartEncoder):
    def __init__(self, fmt: CsvFormat) -> None:
        super().__init__()
        self._fmt = fmt

    def add(self, batch: pa.RecordBatch) -> None:
        self.append(self._fmt.encode_rows(batch))
