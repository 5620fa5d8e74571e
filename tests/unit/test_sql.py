"""SQL dump: CREATE TABLE, multi-row INSERTs counted from the part's start, loadable."""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest

from egress.exceptions import UnknownNameError
from egress.formats.sql import SqlDumpFormat
from egress.sources.base import SOURCE_TYPE

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False, metadata={SOURCE_TYPE: b"INTEGER"}),
    pa.field('we"ird name', pa.string(), metadata={SOURCE_TYPE: b"TEXT"}),
    pa.field("blob", pa.binary(), metadata={SOURCE_TYPE: b"BLOB"}),
    pa.field("r", pa.float64(), metadata={SOURCE_TYPE: b"REAL"}),
])


def batch(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array(ids), pa.array([f"it's {i}\r\n" if i % 3 else None for i in ids]),
         pa.array([bytes([i]) for i in ids]), pa.array([i / 4 for i in ids])],
        schema=SCHEMA,
    )


def dump(fmt: SqlDumpFormat, parts: list[list[int]]) -> str:
    out, rows = fmt.header(SCHEMA), 0
    for ids in parts:
        enc = fmt.part_encoder(SCHEMA, rows)
        for start in range(0, len(ids), 4):  # batches of 4 inside the part
            enc.add(batch(ids[start : start + 4]))
        out += enc.finish()
        rows += len(ids)
    return (out + fmt.footer(SCHEMA, rows)).decode()


def test_header_statements_and_footer() -> None:
    fmt = SqlDumpFormat(table='my "table"', primary_key=["id"], rows_per_insert=3)
    text = dump(fmt, [[1, 2, 3, 4, 5, 6, 7], [8, 9]])
    head = (
        '-- egress SQL dump of table my "table" (sqlite)\nBEGIN;\n'
        'CREATE TABLE IF NOT EXISTS "my ""table""" (\n  "id" INTEGER NOT NULL,\n'
        '  "we""ird name" TEXT,\n  "blob" BLOB,\n  "r" REAL,\n  PRIMARY KEY ("id")\n);\n'
    )
    assert text.startswith(head) and text.endswith(";\nCOMMIT;\n")
    insert = 'INSERT INTO "my ""table""" ("id", "we""ird name", "blob", "r") VALUES\n'
    # 3 rows per statement, counted from the start of each part: 3+3+1, then 2
    assert text.count(insert) == 4
    body = text[len(head):]
    statements = [s for s in body.split(insert) if s]
    assert [s.count("\n(") + 1 for s in statements] == [3, 3, 1, 2]


def test_the_dump_loads_into_sqlite() -> None:
    fmt = SqlDumpFormat(table="t", primary_key=["id"], rows_per_insert=4)
    text = dump(fmt, [list(range(1, 11)), [11, 12, 13]])
    conn = sqlite3.connect(":memory:")
    conn.executescript(text)
    rows = conn.execute('SELECT id, "we""ird name", blob, r FROM t ORDER BY id').fetchall()
    assert rows == [
        (i, f"it's {i}\r\n" if i % 3 else None, bytes([i]), i / 4) for i in range(1, 14)
    ]


def test_an_empty_part_writes_nothing() -> None:
    fmt = SqlDumpFormat(table="t")
    enc = fmt.part_encoder(SCHEMA, 0)
    enc.add(batch([]))
    assert enc.finish() == b""
    conn = sqlite3.connect(":memory:")
    conn.executescript(dump(fmt, []))
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_unknown_dialect() -> None:
    with pytest.raises(UnknownNameError, match="unknown SQL dialect 'oracle'"):
        SqlDumpFormat(table="t", dialect="oracle")
