"""Every format × compression from a PostgreSQL table of every supported type, read back.

The output is parsed with independent readers (pyarrow, the csv and json modules, gzip,
zstandard, psql) and compared with the rows psycopg reads from the source, type by type.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import gzip
import io
import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pyarrow.parquet as pq
import pytest
import zstandard

import egress
from egress.sources.postgres import PostgresSource
from pgserver import PgServer

pytestmark = pytest.mark.postgres

PART_ROWS = 7

# column → kind; the kind says how a value is decoded and compared
COLUMNS: dict[str, str] = {
    "id": "int", "i2": "int", "i4": "int", "i8": "int", "f4": "f4", "f8": "f8",
    "dec": "dec", "big": "str", "wide": "str", "t": "str", "vc": "str", "ch": "str",
    "b": "bytes", "bo": "bool", "d": "date", "ts": "datetime", "tstz": "datetime",
    "tm": "time", "jb": "json", "js": "json", "u": "str",
    "ia": "list:int", "i8a": "list:int", "ta": "list:str", "fa": "list:f8", "f4a": "list:f4",
    "ba": "list:bool", "na": "list:str", "ua": "list:str", "iv": "str", "ip": "str",
}

CREATE = """
CREATE TABLE kinds (
  id bigint PRIMARY KEY, i2 smallint, i4 integer, i8 bigint, f4 real, f8 double precision,
  dec numeric(12,3), big numeric, wide numeric(45,5), t text, vc varchar(20), ch char(4),
  b bytea, bo boolean, d date, ts timestamp, tstz timestamptz, tm time, jb jsonb, js json,
  u uuid, ia integer[], i8a bigint[], ta text[], fa double precision[], f4a real[],
  ba boolean[], na numeric[], ua uuid[], iv interval, ip inet)
"""
ROWS = r"""
INSERT INTO kinds VALUES
(1, 1, 1, 1, 1.1, 1.1, 1.500, '3.14159265358979323846264338327950288419716939937510',
 123.45, 'hello', 'vc', 'ab', '\x0102', true, '2024-02-29', '2024-02-29 12:34:56.789012',
 '2024-02-29 12:34:56.789012+02', '12:34:56.789012', '{"a": [1, 2.5, "x"], "b": {"c": null}}',
 E'{"k": "v",\r\n "n": 1}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2,3}', '{1}', '{a,b}',
 '{1.5,2.25}', '{1.1}', '{t,f}', '{1.10,2}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}',
 '1 year 2 mons 3 days 04:05:06.789', '192.168.0.1/24'),
(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(3, -32768, -2147483648, -9223372036854775808, '-Infinity', '-Infinity', -999999999.999,
 '-0.000000000000000000000000000000000000000001',
 '-9999999999999999999999999999999999999999.99999', '', '', '', '\x', false, '0001-01-01',
 '0001-01-01 00:00:00', '0001-01-01 00:00:00+00', '00:00:00', '[]', '""',
 '00000000-0000-0000-0000-000000000000', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
 '-1 days', '::1'),
(4, 32767, 2147483647, 9223372036854775807, 'Infinity', 'Infinity', 999999999.999, '1e100',
 '9999999999999999999999999999999999999999.99999',
 E'comma, "quote" ''single'' back\\slash\r\nCRLF\nLF\rCR\ttab\x01\x1f é ✓ 😀 中文',
 'x,y"z', 'ü"', (SELECT string_agg(set_byte('\x00'::bytea, 0, g), ''::bytea)
 FROM generate_series(0, 255) g), true, '9999-12-31', '9999-12-31 23:59:59.999999',
 '9999-12-31 23:59:59.999999+00', '23:59:59.999999',
 '{"s": "line\nbreak \"q\" \u00e9 \u0001", "n": -1.5e300, "big": 123456789012345678901234567890}',
 '{"dup": 1, "x": [true, false, null], "dup": 2}', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
 '{-2147483648,2147483647,NULL}', '{-9223372036854775808,9223372036854775807}',
 ARRAY['comma,', 'quote"', 'brace{}', 'back\slash', 'NULL', NULL, '', E'line\nbreak', 'é😀'],
 ARRAY['NaN', 'Infinity', '-Infinity', '-0', '5e-324', '1.7976931348623157e308', NULL]::float8[],
 ARRAY['NaN', '-0', '3.4028235e38', '1e-45', NULL]::real[], ARRAY[true, NULL, false],
 '{NaN,-1.5,0.000}', '{NULL}', '-178000000 years', '10.0.0.0/8'),
(5, 0, 0, 0, 'NaN', 'NaN', 0.000, '0', '0.00000', ' ', ' ', ' ', '\x00', false, NULL, NULL,
 NULL, NULL, 'null', 'null', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(6, NULL, NULL, NULL, '-0', '-0', NULL, NULL, NULL, 'NULL', '\N', NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, '"a string"', '3.5', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL),
(7, NULL, NULL, NULL, '1e-45', '5e-324', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(8, NULL, NULL, NULL, '3.4028235e38', '1.7976931348623157e308', NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL);
INSERT INTO kinds (id, i2, i4, i8, f4, f8, dec, big, t, d, ts, tstz, jb, ia, ta, fa)
SELECT g, g, g * 1000, g * 1000000000000, g / 3.0, g / 7.0, g * 1.001, g::numeric / 3,
       'row ' || g, date '2024-01-01' + g, timestamp '2024-01-01' + g * interval '1h 1us',
       timestamptz '2024-01-01 00:00+00' + g * interval '1 min', jsonb_build_object('g', g),
       ARRAY[g, -g], ARRAY['r' || g], ARRAY[g / 3.0]::float8[]
FROM generate_series(9, 40) g;
"""
# the comparison query: how every column is read from PostgreSQL with psycopg
EXPECTED_SQL = (
    "SELECT id, i2, i4, i8, f4, f8, dec, big::text, wide::text, t, vc, ch, b, bo, d, ts, tstz,"
    " tm, jb, js, u::text, ia, i8a, ta, fa, f4a, ba, na::text[], ua::text[], iv::text, ip::text"
    " FROM kinds ORDER BY id"
)


@pytest.fixture(scope="module")
def source_url(pg_server: PgServer) -> str:
    url = pg_server.create_database("roundtrip_source")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CREATE)
        conn.execute(ROWS)
    return url


@pytest.fixture(scope="module")
def expected(source_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(source_url) as conn:
        conn.execute("SET TimeZone = 'UTC'")  # years 1 and 9999 stay in Python's range
        rows = conn.execute(EXPECTED_SQL).fetchall()
    return [canon_row(dict(zip(COLUMNS, row, strict=True))) for row in rows]


# --- canonical values: equal exactly when the values are the same ----------------------


def canon(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind.startswith("list:"):
        return [canon(kind[5:], v) for v in value]
    if kind == "f8":
        return "nan" if math.isnan(value) else repr(float(value))  # repr keeps -0.0
    if kind == "f4":
        return "nan" if math.isnan(value) else repr(float(np.float32(value)))
    if kind == "dec":
        return str(decimal.Decimal(value))  # keeps the scale: 1.500 is not 1.5
    if kind == "datetime" and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def canon_row(row: dict[str, Any]) -> dict[str, Any]:
    return {name: canon(COLUMNS[name], row[name]) for name in COLUMNS}


def assert_same_rows(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Row by row, column by column, so that a failure names the value that changed."""
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        diffs = {n: (canon(COLUMNS[n], row[n]), want[n]) for n in COLUMNS
                 if canon(COLUMNS[n], row[n]) != want[n]}
        assert not diffs, f"row id={want['id']}: (got, expected) {diffs}"


def _float(value: Any) -> Any:
    return None if value is None else float(value)  # "NaN", "Infinity", "-Infinity" too


DECODE_TEXT: dict[str, Callable[[Any], Any]] = {
    "int": int, "f8": float, "f4": float, "dec": decimal.Decimal, "str": str,
    "bytes": lambda s: bytes.fromhex(s.removeprefix("\\x")), "bool": {"true": True,
    "false": False}.__getitem__, "date": dt.date.fromisoformat,
    "datetime": dt.datetime.fromisoformat, "time": dt.time.fromisoformat, "json": json.loads,
}
DECODE_JSON: dict[str, Callable[[Any], Any]] = {
    **DECODE_TEXT, "int": int, "f8": _float, "f4": _float, "bytes": base64.b64decode,
    "bool": bool, "json": lambda v: v,
}


def decode(kind: str, value: Any, decoders: dict[str, Callable[[Any], Any]]) -> Any:
    if value is None:
        return None
    if kind.startswith("list:"):
        element = kind[5:]
        items = json.loads(value) if isinstance(value, str) else value
        return [decode(element, v, DECODE_JSON) for v in items]
    return decoders[kind](value)


# --- readers ------------------------------------------------------------------------------


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.decompress(data)  # reads every member
    if compression == "zstd":
        # one frame per part: read them all
        with zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        ) as reader:
            return reader.read()
    return data


def read_csv(text: str) -> list[dict[str, Any]]:
    assert "\r\n" in text
    records = list(csv.reader(io.StringIO(text, newline="")))
    assert records[0] == list(COLUMNS)
    rows = []
    for record in records[1:]:
        row = {}
        for (name, kind), field in zip(COLUMNS.items(), record, strict=True):
            # the csv module reads both NULL (empty) and "" as ''; text columns are
            # checked for that difference on the raw bytes in the test
            empty_is_null = not (kind == "str" and name in ("t", "vc", "ch"))
            raw = None if field == "" and empty_is_null else field
            row[name] = decode(kind, raw, DECODE_TEXT)
        rows.append(row)
    return rows


def read_json_rows(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for obj in objects:
        assert list(obj) == list(COLUMNS)
        rows.append({n: decode(k, obj[n], DECODE_JSON) for n, k in COLUMNS.items()})
    return rows


def text_output(out: Path, fmt: str, compression: str) -> str:
    suffix = {"none": "", "gzip": ".gz", "zstd": ".zst"}[compression]
    data = (out / f"kinds.{fmt}{suffix}").read_bytes()
    return decompress(data, compression).decode("utf-8")


def export(source_url: str, out: Path, fmt: str, compression: str) -> dict[str, Any]:
    result = egress.export(
        source_url, ["kinds"], to=out, format=fmt, compression=compression,
        part_rows=PART_ROWS, fsync=False,
    )
    assert result.manifest is not None and not result.interrupted
    assert result.manifest["tables"][0]["rows"] == 40
    parts = sum(f["parts"] for f in result.manifest["files"])
    assert parts >= 40 // PART_ROWS  # several parts, so their joins are tested too
    return result.manifest


# --- tests ----------------------------------------------------------------------------------

COMPRESSIONS = ["none", "gzip", "zstd"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_csv_round_trip(
    source_url: str, expected: list[dict[str, Any]], tmp_path: Path, compression: str
) -> None:
    export(source_url, tmp_path / "out", "csv", compression)
    text = text_output(tmp_path / "out", "csv", compression)
    got = read_csv(text)
    nulls_as_empty = [
        {n: ("" if v is None and n in ("t", "vc", "ch") else v) for n, v in row.items()}
        for row in expected
    ]
    assert_same_rows(got, nulls_as_empty)
    lines = text.split("\r\n")
    # NULL is an empty field, an empty string is "": row 2 is all NULL, row 3 all empty
    assert lines[2] == "2" + "," * (len(COLUMNS) - 1)
    assert lines[3].split(",")[9:12] == ['""', '""', "    "]  # char(4) keeps its padding


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_json_round_trip(
    source_url: str, expected: list[dict[str, Any]], tmp_path: Path, fmt: str, compression: str
) -> None:
    export(source_url, tmp_path / "out", fmt, compression)
    text = text_output(tmp_path / "out", fmt, compression)
    if fmt == "jsonl":
        lines = text.split("\n")
        assert lines[-1] == "" and len(lines) == 41  # one row per line, even with json line breaks
        objects = [json.loads(line) for line in lines[:-1]]
    else:
        objects = json.loads(text)
    assert_same_rows(read_json_rows(objects), expected)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_parquet_round_trip(
    source_url: str, expected: list[dict[str, Any]], tmp_path: Path, compression: str
) -> None:
    export(source_url, tmp_path / "out", "parquet", compression)
    files = sorted((tmp_path / "out" / "kinds").glob("part-*.parquet"))
    assert len(files) == 1  # one file, a row group a part
    assert pq.ParquetFile(files[0]).metadata.num_row_groups == -(-40 // PART_ROWS)
    src = PostgresSource(source_url)
    try:
        schema = src.describe("kinds").schema
    finally:
        src.close()
    codec = {"none": "UNCOMPRESSED", "gzip": "GZIP", "zstd": "ZSTD"}[compression]
    rows = []
    for path in files:
        parquet = pq.ParquetFile(path)
        assert parquet.metadata.row_group(0).column(0).compression == codec
        table = parquet.read()
        assert table.schema.remove_metadata().equals(schema.remove_metadata())
        for field in schema:
            assert table.schema.field(field.name).metadata == field.metadata
        for row in table.to_pylist():
            # json stays text in Parquet (logical type json); decimals and lists are typed
            rows.append({n: json.loads(v) if COLUMNS[n] == "json" and v is not None else v
                         for n, v in row.items()})
    assert_same_rows(rows, expected)


def psql(server: PgServer) -> str:
    local = server.bindir / "psql"
    return str(local) if local.exists() else "psql"


def table_text(url: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Column declarations and every row as PostgreSQL's own text, in key order."""
    with psycopg.connect(url) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        columns = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
            "WHERE attrelid = 'kinds'::regclass AND attnum > 0 ORDER BY attnum"
        ).fetchall()
        # json keeps its input text, whose line breaks between tokens egress writes as
        # spaces: compare it as jsonb; every other column exactly as PostgreSQL prints it
        select = ", ".join("js::jsonb" if c == "js" else c for c in COLUMNS)
        rows = conn.execute(f"SELECT ROW({select})::text FROM kinds ORDER BY id").fetchall()
    return columns, rows


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_sql_dump_loads_back_with_psql(
    source_url: str, pg_server: PgServer, tmp_path: Path, compression: str
) -> None:
    export(source_url, tmp_path / "out", "sql", compression)
    dump = tmp_path / "kinds.sql"
    dump.write_text(text_output(tmp_path / "out", "sql", compression))
    target = pg_server.create_database(f"roundtrip_sql_{compression}")
    subprocess.run(
        [psql(pg_server), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target, "-f", str(dump)],
        check=True, capture_output=True, timeout=60,
    )
    assert table_text(target) == table_text(source_url)
    with psycopg.connect(target) as conn:
        (key,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = 'kinds'::regclass AND contype = 'p'"
        ).fetchone()
    assert key == "PRIMARY KEY (id)"
