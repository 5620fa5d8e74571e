"""Every format × compression from a MariaDB table of every supported type, read back.

The output is parsed with independent readers (pyarrow, the csv and json modules, gzip,
zstandard, the ``mariadb`` client loading the SQL dump) and compared value by value with
what PyMySQL's own converters read from the source (the source reads the server's text
with them switched off and casts it with Arrow: two different paths).
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import gzip
import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pymysql
import pytest
import zstandard

import egress
from egress.sources.mysql import MySqlSource
from mariadbserver import MariaDbServer

pytestmark = pytest.mark.mariadb

COMPRESSIONS = ["none", "gzip", "zstd"]

PART_ROWS = 7
ROWS = 40

# column → kind; the kind says how a value is decoded and compared
COLUMNS: dict[str, str] = {
    "id": "int", "ti": "int", "tiu": "int", "si": "int", "siu": "int", "mi": "int",
    "miu": "int", "i": "int", "iu": "int", "bi": "int", "biu": "int", "dc": "dec",
    "wide": "dec", "f": "f4", "d": "f8", "bt": "int", "b1": "bool", "bo": "bool",
    "ch": "str", "vc": "str", "tx": "str", "bn": "bytes", "vb": "bytes", "bl": "bytes",
    "da": "date", "dtm": "datetime", "ts": "datetime", "tm": "str", "yr": "int",
    "en": "str", "st": "str", "js": "json",
}

CREATE = """
CREATE TABLE kinds (
  id bigint PRIMARY KEY, ti tinyint, tiu tinyint unsigned, si smallint,
  siu smallint unsigned, mi mediumint, miu mediumint unsigned, i int, iu int unsigned,
  bi bigint, biu bigint unsigned, dc decimal(12,3), wide decimal(65,30), f float,
  d double, bt bit(10), b1 bit(1), bo boolean, ch char(4), vc varchar(200), tx text,
  bn binary(4), vb varbinary(300), bl blob, da date, dtm datetime(6), ts timestamp(6) NULL,
  tm time(6), yr year, en enum('a','b','c d'), st set('x','y','z'), js json
) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
"""
SPECIAL = "comma, \"quote\" 'single' back\\slash\r\nCRLF\nLF\rCR\ttab\x01\x1f é ✓ 😀 中文"
ALL_BYTES = bytes(range(256))
INSERT = "INSERT INTO kinds VALUES (" + ", ".join(["%s"] * len(COLUMNS)) + ")"
VALUES: list[tuple[Any, ...]] = [
    (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "1.500", "3.141592653589793238462643383279",
     1.1, 1.1, 5, 1, True, "ab", "vc", "hello", b"\x01\x02", b"\x01\x02", b"\x01\x02",
     "2024-02-29", "2024-02-29 12:34:56.789012", "2024-02-29 12:34:56.789012",
     "12:34:56.789012", 2024, "b", "x,z", '{"a": [1, 2.5, "x"], "b": {"c": null}}'),
    (2, *([None] * (len(COLUMNS) - 1))),
    (3, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0,
     "-999999999.999", "-" + "9" * 35 + "." + "9" * 30, -3.4028234663852886e38,
     -1.7976931348623157e308, 0, 0, False, "", "", "", b"", b"", b"", "1000-01-01",
     "1000-01-01 00:00:00", "1970-01-01 00:00:01", "-838:59:59.000000", 1901, "a", "",
     "[]"),
    (4, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
     9223372036854775807, 18446744073709551615, "999999999.999",
     "9" * 35 + "." + "9" * 30, 3.4028234663852886e38, 1.7976931348623157e308, 1023, 1,
     True, 'ü"😀\'', SPECIAL, "nul\x00byte " + SPECIAL, b"\xff\x00\xff\x00", ALL_BYTES[:300],
     ALL_BYTES, "9999-12-31", "9999-12-31 23:59:59.999999", "2038-01-19 03:14:07.999999",
     "838:59:59.000000", 2155, "c d", "x,y,z",
     '{"s": "line\\nbreak \\"q\\" é 😀 \\u0001",\r\n "n": -1.5e300, '
     '"big": 123456789012345678901234567890}'),
    (5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "0.000", "0", 0.0, 0.0, 0, 0, False, " ", " ", " ",
     b"\x00", b"\x00", b"\x00", None, None, None, "00:00:00", 0, None, None, "null"),
    (6, None, None, None, None, None, None, None, None, None, None, "-0.001",
     "0." + "0" * 29 + "1", 1e-45, 5e-324, 1, None, None, "NULL", "\\N", "NULL", None,
     None, None, "0001-01-01", "0001-01-01 00:00:00.000001", None, "-00:00:00.000001",
     None, None, None, '"a string"'),
    (7, None, None, None, None, None, None, None, None, None, None, None, None, -0.0, -0.0,
     None, None, None, None, None, None, None, None, None, None, None, None,
     "123:45:06.5", None, None, None, "3.5"),
]
GENERATED = """
INSERT INTO kinds (id, i, bi, biu, dc, wide, f, d, vc, da, dtm, ts, tm, js)
SELECT seq, seq, seq * 1000000000000, 18446744073709551615 - seq, seq * 1.001, seq / 3,
       seq / 3, seq / 7, CONCAT('row ', seq), DATE '2024-01-01' + INTERVAL seq DAY,
       TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq * 3600000001 MICROSECOND,
       TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq MINUTE,
       SEC_TO_TIME(seq * 3601.5), JSON_OBJECT('g', seq)
FROM seq_8_to_40
"""
# how every column is read with PyMySQL's own converters: FLOAT through DOUBLE (its text
# has 6 digits), BIT as a number, TIME as its text (PyMySQL would make a timedelta)
EXPECTED_SQL = (
    "SELECT id, ti, tiu, si, siu, mi, miu, i, iu, bi, biu, dc, wide, CAST(f AS DOUBLE), d, "
    "bt + 0, b1 + 0, bo, ch, vc, tx, bn, vb, bl, da, dtm, ts, CAST(tm AS CHAR), yr, en, st, "
    "js FROM kinds ORDER BY id"
)


@pytest.fixture(scope="module")
def source_url(mariadb_server: MariaDbServer) -> str:
    url = mariadb_server.create_database("roundtrip_source")
    conn = pymysql.connect(host="127.0.0.1", port=mariadb_server.port, user="root",
                           database="roundtrip_source", charset="utf8mb4", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(CREATE)
        cur.executemany(INSERT, VALUES)
        cur.execute(GENERATED)
    conn.close()
    return url


@pytest.fixture(scope="module")
def expected(mariadb_server: MariaDbServer, source_url: str) -> list[dict[str, Any]]:
    conn = pymysql.connect(host="127.0.0.1", port=mariadb_server.port, user="root",
                           database="roundtrip_source", charset="utf8mb4")
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(EXPECTED_SQL)
        rows = cur.fetchall()
    conn.close()
    out = []
    for row in rows:
        values = dict(zip(COLUMNS, row, strict=True))
        if values["ts"] is not None:
            values["ts"] = values["ts"].replace(tzinfo=dt.UTC)
        for name in ("b1", "bo"):
            values[name] = None if values[name] is None else bool(values[name])
        values["js"] = None if values["js"] is None else json.loads(values["js"])
        out.append(canon_row(values))
    # the extremes are what they were meant to be (the reference itself is right)
    assert out[3]["biu"] == 18446744073709551615 and out[2]["bi"] == -(2**63)
    assert out[3]["vc"] == SPECIAL and out[3]["bl"] == ALL_BYTES
    assert out[2]["tm"] == "-838:59:59.000000" and out[5]["tm"] == "-00:00:00.000001"
    assert out[3]["f"] == repr(float(np.float32(3.4028235e38)))
    assert out[0]["wide"] == "3.141592653589793238462643383279"
    assert len(out) == ROWS
    return out


# --- canonical values: equal exactly when the values are the same ----------------------


def canon(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "f8":
        return repr(float(value))  # repr keeps -0.0
    if kind == "f4":
        return repr(float(np.float32(value)))
    if kind == "dec":
        return str(decimal.Decimal(value))  # keeps the scale: 1.500 is not 1.5
    if kind == "datetime" and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    if kind == "bool":
        return bool(value)
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


DECODE_TEXT: dict[str, Callable[[Any], Any]] = {
    "int": int, "f8": float, "f4": float, "dec": decimal.Decimal, "str": str,
    "bytes": lambda s: bytes.fromhex(s.removeprefix("\\x")),
    "bool": {"true": True, "false": False}.__getitem__, "date": dt.date.fromisoformat,
    "datetime": dt.datetime.fromisoformat, "json": json.loads,
}
DECODE_JSON: dict[str, Callable[[Any], Any]] = {
    **DECODE_TEXT, "f8": float, "f4": float, "bytes": base64.b64decode, "bool": bool,
    "json": lambda v: v,
}


def decode(kind: str, value: Any, decoders: dict[str, Callable[[Any], Any]]) -> Any:
    return None if value is None else decoders[kind](value)


def read_csv(text: str) -> list[dict[str, Any]]:
    records = list(csv.reader(io.StringIO(text, newline="")))
    assert records[0] == list(COLUMNS)
    rows = []
    for record in records[1:]:
        row = {}
        for (name, kind), field in zip(COLUMNS.items(), record, strict=True):
            # the csv module reads NULL (empty) and "" alike: text is checked on raw bytes
            raw = None if field == "" and kind != "str" else field
            row[name] = decode(kind, raw, DECODE_TEXT)
        rows.append(row)
    return rows


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.decompress(data)  # every member
    if compression == "zstd":
        with zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        ) as reader:
            return reader.read()
    return data


def text_output(out: Path, fmt: str, compression: str) -> str:
    suffix = {"none": "", "gzip": ".gz", "zstd": ".zst"}[compression]
    data = (out / f"kinds.{fmt}{suffix}").read_bytes()
    return decompress(data, compression).decode("utf-8")


def export(source_url: str, out: Path, fmt: str, compression: str) -> None:
    result = egress.export(source_url, ["kinds"], to=out, format=fmt,
                           compression=compression, part_rows=PART_ROWS, fsync=False)
    assert result.manifest is not None and not result.interrupted
    assert result.manifest["tables"][0]["rows"] == ROWS
    assert sum(f["parts"] for f in result.manifest["files"]) >= ROWS // PART_ROWS


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_csv_round_trip(
    source_url: str, expected: list[dict[str, Any]], tmp_path: Path, compression: str
) -> None:
    export(source_url, tmp_path / "out", "csv", compression)
    text = text_output(tmp_path / "out", "csv", compression)
    nulls_as_empty = [{n: ("" if v is None and COLUMNS[n] == "str" else v)
                       for n, v in row.items()} for row in expected]
    assert_same_rows(read_csv(text), nulls_as_empty)
    lines = text.split("\r\n")
    assert lines[2] == "2" + "," * (len(COLUMNS) - 1)  # NULL is an empty field
    assert lines[3].split(",")[18:21] == ['""', '""', '""']  # "" is an empty string


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_json_round_trip(
    source_url: str, expected: list[dict[str, Any]], tmp_path: Path, fmt: str, compression: str
) -> None:
    export(source_url, tmp_path / "out", fmt, compression)
    text = text_output(tmp_path / "out", fmt, compression)
    if fmt == "jsonl":
        lines = text.split("\n")
        assert lines[-1] == "" and len(lines) == ROWS + 1  # one row a line, even with JSON
        objects = [json.loads(line) for line in lines[:-1]]
    else:
        objects = json.loads(text)
    rows = []
    for obj in objects:
        assert list(obj) == list(COLUMNS)
        rows.append({n: decode(k, obj[n], DECODE_JSON) for n, k in COLUMNS.items()})
    assert_same_rows(rows, expected)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_parquet_round_trip(
    source_url: str, expected: list[dict[str, Any]], tmp_path: Path, compression: str
) -> None:
    export(source_url, tmp_path / "out", "parquet", compression)
    files = sorted((tmp_path / "out" / "kinds").glob("part-*.parquet"))
    assert len(files) == 1
    src = MySqlSource(source_url)
    try:
        schema = src.describe("kinds").schema
    finally:
        src.close()
    table = pq.ParquetFile(files[0]).read()
    assert table.schema.remove_metadata().equals(schema.remove_metadata())
    types = {f.name: str(f.type) for f in table.schema}
    assert types["biu"] == "uint64" and types["dc"] == "decimal128(12, 3)"
    assert types["ts"] == "timestamp[us, tz=UTC]" and types["dtm"] == "timestamp[us]"
    assert types["f"] == "float" and types["bo"] == "bool" and types["yr"] == "uint16"
    rows = [{n: json.loads(v) if COLUMNS[n] == "json" and v is not None else v
             for n, v in row.items()} for row in table.to_pylist()]
    assert_same_rows(rows, expected)


def table_text(server: MariaDbServer, database: str) -> tuple[list[Any], list[Any]]:
    """Column declarations and every row as MariaDB's own text (hex for bytes)."""
    conn = server.connect(database)
    select = ", ".join(
        f"HEX({c})" if COLUMNS[c] == "bytes" else
        "JSON_COMPACT(js)" if c == "js" else f"CAST({c} AS CHAR)" if c in ("bt", "b1") else
        "CAST(CAST(f AS DOUBLE) AS CHAR)" if c == "f" else c
        for c in COLUMNS)
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY FROM "
                    "information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
                    "TABLE_NAME = 'kinds' ORDER BY ORDINAL_POSITION")
        columns = list(cur.fetchall())
        cur.execute(f"SELECT {select} FROM kinds ORDER BY id")
        rows = list(cur.fetchall())
    conn.close()  # type: ignore[attr-defined]
    return columns, rows


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_sql_dump_loads_back_with_the_mariadb_client(
    source_url: str, mariadb_server: MariaDbServer, tmp_path: Path, compression: str
) -> None:
    export(source_url, tmp_path / "out", "sql", compression)
    text = text_output(tmp_path / "out", "sql", compression)
    assert text.count("_utf8mb4 X'") >= 2  # the CRs and the NUL travel as hex
    target = f"roundtrip_sql_{compression}"
    mariadb_server.create_database(target)
    # a session as a user's may be: backslashes as escapes, another time zone
    subprocess.run(
        ["mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", str(mariadb_server.port),
         "-u", "root", "--init-command=SET time_zone = '+05:00'", target],
        input=text.encode(), check=True, capture_output=True, timeout=60,
    )
    assert table_text(mariadb_server, target) == table_text(mariadb_server, "roundtrip_source")
