"""JSON Lines and JSON: one object per row, keys in column order.

JSON Lines ends every row with ``\\n``. JSON is one array per file: ``[`` in the header,
``,\\n`` before every row but the file's first (the cross-part state is the number of rows
the file already holds), ``]`` in the footer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from egress.formats import render
from egress.formats.base import TextFormat, TextPartEncoder, concat_strings


def object_lines(batch: pa.RecordBatch, line_start: str, line_end: str) -> pa.Array:
    """One JSON object per row, each wrapped in ``line_start`` … ``line_end``."""
    pieces: list[pa.Array | str] = []
    for i, (field, array) in enumerate(zip(batch.schema, batch.columns, strict=True)):
        key = json.dumps(field.name, ensure_ascii=False)
        pieces.append(("{" if i == 0 else ",") + key + ":")
        pieces.append(render.json_value(array, field))
    pieces.append("}")
    if not batch.num_columns:
        pieces = ["{}"]
    # a NULL is written by the join itself: no copy of a column to fill it
    return pc.binary_join_element_wise(line_start, *pieces, line_end, "",
                                       null_handling="replace", null_replacement="null")


class JsonLinesFormat(TextFormat):
    name = "jsonl"
    extension = "jsonl"

    def header(self, schema: pa.Schema) -> bytes:
        return b""

    def part_encoder(self, schema: pa.Schema, rows_before: int, offset: int = 0) -> _Part:
        return _Part(lambda b, first: concat_strings(object_lines(b, "", "\n")))

    def footer(
        self, schema: pa.Schema, rows_in_file: int, metas: Sequence[bytes] = ()
    ) -> bytes:
        return b""


class JsonArrayFormat(TextFormat):
    name = "json"
    extension = "json"

    def header(self, schema: pa.Schema) -> bytes:
        return b"[\n"

    def part_encoder(self, schema: pa.Schema, rows_before: int, offset: int = 0) -> _Part:
        def encode(batch: pa.RecordBatch, first: bool) -> bytes | memoryview:
            data = concat_strings(object_lines(batch, ",\n", ""))
            # the file's very first row has no separator before it
            return data[2:] if first else data

        return _Part(encode, first=rows_before == 0)

    def footer(
        self, schema: pa.Schema, rows_in_file: int, metas: Sequence[bytes] = ()
    ) -> bytes:
        return b"\n]\n" if rows_in_file else b"]\n"


class _Part(TextPartEncoder):
    def __init__(self, encode: Callable[..., Any], first: bool = False) -> None:
        super().__init__()
        self._encode = encode
        self._first = first

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.append(self._encode(batch, self._first))
        self._first = False
