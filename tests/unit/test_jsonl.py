"""JSON Lines and JSON arrays: one object per row, keys in column order."""

from __future__ import annotations

import json

import pyarrow as pa

from egress.formats.jsonl import JsonArrayFormat, JsonLinesFormat
from egress.sources.base import LOGICAL_TYPE

SCHEMA = pa.schema([
    pa.field("id", pa.int64()), pa.field('na"me\u2028', pa.string()),
    pa.field("doc", pa.string(), metadata={LOGICAL_TYPE: b"json"}),
])


def batch(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array(ids), pa.array([f"n{i}\n" if i % 2 else None for i in ids]),
         pa.array([json.dumps({"i": [i, None]}) for i in ids])],
        schema=SCHEMA,
    )


def write(fmt: JsonLinesFormat | JsonArrayFormat, parts: list[list[int]]) -> bytes:
    """A file of several parts, each encoded by a fresh encoder as a resumed run would."""
    out, rows = fmt.header(SCHEMA), 0
    for ids in parts:
        enc = fmt.part_encoder(SCHEMA, rows)
        enc.add(batch(ids[: len(ids) // 2]))
        enc.add(batch(ids[len(ids) // 2 :]))
        out += enc.finish()
        rows += len(ids)
    return out + fmt.footer(SCHEMA, rows)


def expected(ids: list[int]) -> list[dict]:
    return [{"id": i, 'na"me\u2028': f"n{i}\n" if i % 2 else None, "doc": {"i": [i, None]}}
            for i in ids]


def test_json_lines() -> None:
    data = write(JsonLinesFormat(), [[1, 2, 3], [4], [5, 6]])
    lines = data.decode().split("\n")
    assert lines[-1] == ""  # every row ends with \n
    assert [json.loads(line) for line in lines[:-1]] == expected([1, 2, 3, 4, 5, 6])
    assert list(json.loads(lines[0])) == ["id", 'na"me\u2028', "doc"]  # column order


def test_json_array_across_parts() -> None:
    data = write(JsonArrayFormat(), [[1, 2, 3], [4], [5, 6]])
    assert json.loads(data) == expected([1, 2, 3, 4, 5, 6])
    assert data.startswith(b"[\n{") and data.endswith(b"}\n]\n")
    assert data.count(b",\n{") == 5


def test_empty_files() -> None:
    assert write(JsonArrayFormat(), []) == b"[\n]\n"
    assert json.loads(write(JsonArrayFormat(), [])) == []
    assert write(JsonLinesFormat(), []) == b""


def test_a_json_part_encoder_with_no_rows_adds_nothing() -> None:
    enc = JsonArrayFormat().part_encoder(SCHEMA, 5)
    enc.add(batch([]))
    assert enc.finish() == b"" and enc.size == 0
