"""Every format × compression from a DuckDB table of every supported type, read back.

The output is parsed with independent readers (pyarrow, the csv and json modules, gzip,
zstandard) and compared value by value with what DuckDB's own Python API reads from the
file (each column fetched in a form Python holds exactly: epoch nanoseconds for
TIMESTAMP_NS, epoch microseconds for TIMESTAMPTZ, DuckDB's text for the types egress
exports as text). The SQL dump is loaded into a fresh DuckDB database and every row
compared with the source's as DuckDB's own text.
"""

from __future__ import annotations

import base64
import calendar
import csv
import datetime as dt
import decimal
import gzip
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import egress
from egress.sources.duckdb import DuckdbSource

PART_ROWS = 7
ROWS = 40

# column → kind; the kind says how a value is decoded and compared
COLUMNS: dict[str, str] = {
    "id": "int", "ti": "int", "si": "int", "i": "int", "bi": "int", "hi": "int",
    "uti": "int", "usi": "int", "ui": "int", "ubi": "int", "uhi": "int",
    "d1": "dec", "d2": "dec", "d3": "dec", "f": "f4", "dd": "f8", "b": "bool", "v": "str",
    "bl": "bytes", "dt": "date", "tm": "time", "ts": "datetime", "tss": "datetime",
    "tsm": "datetime", "tsn": "ns", "tz": "datetime", "ttz": "str", "iv": "str", "u": "str",
    "j": "json", "e": "str", "l": "list:int", "vl": "list:str", "dl": "list:str",
    "s": "json", "m": "json", "a": "json", "bs": "str",
}
# how the expected value of each column is fetched through DuckDB's Python API
EXPECTED_SELECT = {
    "hi": "CAST(hi AS VARCHAR)", "uhi": "CAST(uhi AS VARCHAR)", "d1": "CAST(d1 AS VARCHAR)",
    "d2": "CAST(d2 AS VARCHAR)", "d3": "CAST(d3 AS VARCHAR)", "tsn": "epoch_ns(tsn)",
    "tz": "epoch_us(tz)", "ttz": "CAST(ttz AS VARCHAR)", "iv": "CAST(iv AS VARCHAR)",
    "u": "CAST(u AS VARCHAR)", "j": "CAST(j AS VARCHAR)", "e": "CAST(e AS VARCHAR)",
    "dl": "CAST(dl AS VARCHAR[])", "s": "to_json(s)", "m": "to_json(m)", "a": "to_json(a)",
    "bs": "CAST(bs AS VARCHAR)",
}

CREATE = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'it''s, "complex"');
CREATE TABLE kinds (
  id INTEGER PRIMARY KEY, ti TINYINT, si SMALLINT, i INTEGER, bi BIGINT, hi HUGEINT,
  uti UTINYINT, usi USMALLINT, ui UINTEGER, ubi UBIGINT, uhi UHUGEINT,
  d1 DECIMAL(4,1), d2 DECIMAL(18,3) NOT NULL DEFAULT 0, d3 DECIMAL(38,10), f REAL,
  dd DOUBLE, b BOOLEAN, v VARCHAR, bl BLOB, dt DATE, tm TIME, ts TIMESTAMP,
  tss TIMESTAMP_S, tsm TIMESTAMP_MS, tsn TIMESTAMP_NS, tz TIMESTAMPTZ, ttz TIMETZ,
  iv INTERVAL, u UUID, j JSON, e mood, l INTEGER[], vl VARCHAR[], dl DATE[],
  s STRUCT(a INTEGER, b VARCHAR), m MAP(VARCHAR, INTEGER), a INTEGER[3], bs BIT);
"""
INSERT = r"""
INSERT INTO kinds VALUES
(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 123.4, 1.5, 1.5, 1.1, 1.1, true, 'hello', '\x01\x02'::BLOB,
 '2024-02-29', '12:34:56.789012', '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56',
 '2024-02-29 12:34:56.789', '2024-02-29 12:34:56.789012345', '2024-02-29 12:34:56.789012+02',
 '12:34:56+02', INTERVAL '1 year 2 months 3 days 04:05:06.789',
 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.5, "x"], "b": {"c": null}}', 'ok',
 [1, 2, 3], ['a', 'b'], ['2024-02-29'], {'a': 1, 'b': 'x'}, MAP {'k': 1}, [1, 2, 3],
 '0101'::BIT),
(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(3, -128, -32768, -2147483648, -9223372036854775808,
 -170141183460469231731687303715884105727, 0, 0, 0, 0, 0, -999.9, -999999999999999.999,
 -9999999999999999999999999999.9999999999, '-inf', '-inf', false, '', ''::BLOB,
 '0001-01-01', '00:00:00', '0001-01-01 00:00:00', '0001-01-01 00:00:00',
 '0001-01-01 00:00:00', '1700-01-01 00:00:00.000000001', '0001-01-01 00:00:00+00',
 '00:00:00+15:59', INTERVAL '-1 day', '00000000-0000-0000-0000-000000000000', '[]', 'sad',
 [], [], [], {'a': NULL, 'b': NULL}, MAP {}, [NULL, NULL, NULL], '0'::BIT),
(4, 127, 32767, 2147483647, 9223372036854775807, 170141183460469231731687303715884105727,
 255, 65535, 4294967295, 18446744073709551615, 340282366920938463463374607431768211455,
 999.9, 999999999999999.999, 9999999999999999999999999999.9999999999, 'inf', 'inf', true,
 NULL, NULL, '9999-12-31', '23:59:59.999999', '9999-12-31 23:59:59.999999',
 '9999-12-31 23:59:59', '9999-12-31 23:59:59.999', '2262-04-11 23:47:16.854775806',
 '9999-12-31 23:59:59.999999+00', '23:59:59.999999-15:59', INTERVAL '-178000000 years',
 'ffffffff-ffff-ffff-ffff-ffffffffffff',
 '{"s": "line\nbreak \"q\" \u00e9 \u0001",' || chr(13) || chr(10) ||
 ' "n": -1.5e300, "big": 123456789012345678901234567890, "dup": 1, "dup": 2}',
 'it''s, "complex"', [-2147483648, 2147483647, NULL],
 ['comma,', 'quote"', 'brace{}', 'back\slash', 'NULL', NULL, '', 'line' || chr(10) || 'break',
  'é😀'], ['0001-01-01', NULL, '9999-12-31'],
 {'a': -1, 'b': 'quote" é😀' || chr(10)}, MAP {'k': NULL, 'é': -2}, [NULL, 1, -1],
 '10101010101010101010101'::BIT),
(5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.000, 0, 'nan', 'nan', false, ' ', '\x00'::BLOB,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'null', 'happy', [NULL], [NULL],
 [NULL], NULL, NULL, NULL, NULL),
(6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, '-0.0',
 '-0.0', NULL, 'NULL', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 '"a string"', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(7, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, '1e-45',
 '5e-324', NULL, '\N', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 '3.5', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL,
 '3.4028235e38', '1.7976931348623157e308', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO kinds (id, i, bi, hi, d2, f, dd, v, dt, ts, tsn, tz, j, l, vl)
SELECT g, g * 1000, g * 1000000000000, g * 10000000000000000000000000000000000,
       g * 1.001, g / 3, g / 7, 'row ' || g, DATE '2024-01-01' + g::INTEGER,
       TIMESTAMP '2024-01-01' + g * INTERVAL '1 hour 1 microsecond',
       TIMESTAMP_NS '2024-01-01' + g * INTERVAL '1 second', TIMESTAMPTZ '2024-01-01 00:00+00'
       + g * INTERVAL '1 minute', json_object('g', g), [g, -g], ['r' || g]
FROM range(9, 41) AS r(g);
"""
# a text holding every character class a format must escape, and every byte value
NASTY = ('comma, "quote" \'single\' back\\slash\r\nCRLF\nLF\rCR\ttab\x01\x1f\x7f é ✓ 😀 中文 '
         '\u2028\u2029')


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("duckdb") / "kinds.duckdb"
    con = duckdb.connect(str(path))
    con.execute(CREATE)
    con.execute(INSERT)
    con.execute("UPDATE kinds SET v = ?, bl = ? WHERE id = 4", [NASTY, bytes(range(256))])
    con.close()
    return path


@pytest.fixture(scope="module")
def expected(source: Path) -> list[dict[str, Any]]:
    select = ", ".join(EXPECTED_SELECT.get(c, c) for c in COLUMNS)
    con = duckdb.connect(str(source), read_only=True)
    try:
        rows = con.execute(f"SELECT {select} FROM kinds ORDER BY id").fetchall()
    finally:
        con.close()
    out = []
    for row in rows:
        values = dict(zip(COLUMNS, row, strict=True))
        if values["tz"] is not None:
            values["tz"] = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
                microseconds=values["tz"])
        for name, kind in COLUMNS.items():
            if kind == "json" and values[name] is not None:
                values[name] = json.loads(values[name])
        out.append({n: canon(COLUMNS[n], v) for n, v in values.items()})
    return out


# --- canonical values: equal exactly when the values are the same ----------------------


def canon(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind.startswith("list:"):
        return [canon(kind[5:], v) for v in value]
    if kind == "int":
        return int(value)
    if kind == "f8":
        return "nan" if math.isnan(value) else repr(float(value))  # repr keeps -0.0
    if kind == "f4":
        return "nan" if math.isnan(value) else repr(float(np.float32(value)))
    if kind == "dec":
        return str(decimal.Decimal(value))  # keeps the scale: 1.500 is not 1.5
    if kind == "datetime" and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def assert_same_rows(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Row by row, column by column, so that a failure names the value that changed."""
    assert len(got) == len(expected) == ROWS
    for row, want in zip(got, expected, strict=True):
        diffs = {n: (canon(COLUMNS[n], row[n]), want[n]) for n in COLUMNS
                 if canon(COLUMNS[n], row[n]) != want[n]}
        assert not diffs, f"row id={want['id']}: (got, expected) {diffs}"


def ns_from_text(text: str) -> int:
    """``YYYY-MM-DD HH:MM:SS.fffffffff`` → nanoseconds since the epoch."""
    whole, _, fraction = text.partition(".")
    seconds = calendar.timegm(dt.datetime.fromisoformat(whole).timetuple())
    return seconds * 10**9 + int(fraction.ljust(9, "0"))


def _float(value: Any) -> Any:
    return None if value is None else float(value)  # "NaN", "Infinity", "-Infinity" too


DECODE_TEXT: dict[str, Callable[[Any], Any]] = {
    "int": int, "f8": float, "f4": float, "dec": decimal.Decimal, "str": str,
    "bytes": lambda s: bytes.fromhex(s.removeprefix("\\x")),
    "bool": {"true": True, "false": False}.__getitem__, "date": dt.date.fromisoformat,
    "datetime": dt.datetime.fromisoformat, "time": dt.time.fromisoformat, "json": json.loads,
    "ns": ns_from_text,
}
DECODE_JSON: dict[str, Callable[[Any], Any]] = {
    **DECODE_TEXT, "f8": _float, "f4": _float, "bytes": base64.b64decode, "bool": bool,
    "json": lambda v: v,
}


def decode(kind: str, value: Any, decoders: dict[str, Callable[[Any], Any]]) -> Any:
    if value is None:
        return None
    if kind.startswith("list:"):
        items = json.loads(value) if isinstance(value, str) else value
        return [decode(kind[5:], v, DECODE_JSON) for v in items]
    return decoders[kind](value)


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "zstd":
        with zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        ) as reader:
            return reader.read()
    return data


def text_output(out: Path, fmt: str, compression: str) -> str:
    suffix = {"none": "", "gzip": ".gz", "zstd": ".zst"}[compression]
    return decompress((out / f"kinds.{fmt}{suffix}").read_bytes(), compression).decode()


def export(source: Path, out: Path, fmt: str, compression: str) -> None:
    result = egress.export(f"duckdb:///{source}", ["kinds"], to=out, format=fmt,
                           compression=compression, part_rows=PART_ROWS, fsync=False)
    assert result.manifest is not None and not result.interrupted
    assert result.manifest["tables"][0]["rows"] == ROWS
    assert sum(f["parts"] for f in result.manifest["files"]) >= ROWS // PART_ROWS


COMPRESSIONS = ["none", "gzip", "zstd"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_csv_round_trip(source: Path, expected: list[dict[str, Any]], tmp_path: Path,
                        compression: str) -> None:
    export(source, tmp_path, "csv", compression)
    text = text_output(tmp_path, "csv", compression)
    records = list(csv.reader(io.StringIO(text, newline="")))
    assert records[0] == list(COLUMNS)
    rows = []
    for record in records[1:]:
        # the csv module reads NULL (empty) and "" alike: v is checked on the raw text
        rows.append({n: decode(k, None if f == "" and n != "v" else f, DECODE_TEXT)
                     for (n, k), f in zip(COLUMNS.items(), record, strict=True)})
    want = [{n: ("" if v is None and n == "v" else v) for n, v in r.items()} for r in expected]
    assert_same_rows(rows, want)
    lines = text.split("\r\n")
    assert lines[2] == "2" + "," * 12 + "0.000" + "," * (len(COLUMNS) - 13)  # NULL: empty
    assert lines[3].split(",")[17] == '""'  # an empty string is ""


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_json_round_trip(source: Path, expected: list[dict[str, Any]], tmp_path: Path,
                         fmt: str, compression: str) -> None:
    export(source, tmp_path, fmt, compression)
    text = text_output(tmp_path, fmt, compression)
    if fmt == "jsonl":
        lines = text.split("\n")
        assert lines[-1] == "" and len(lines) == ROWS + 1  # one row a line, JSON CRLFs too
        objects = [json.loads(line) for line in lines[:-1]]
    else:
        objects = json.loads(text)
    rows = []
    for obj in objects:
        assert list(obj) == list(COLUMNS)
        rows.append({n: decode(k, obj[n], DECODE_JSON) for n, k in COLUMNS.items()})
    assert_same_rows(rows, expected)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_parquet_round_trip(source: Path, expected: list[dict[str, Any]], tmp_path: Path,
                            compression: str) -> None:
    export(source, tmp_path, "parquet", compression)
    (path,) = sorted((tmp_path / "kinds").glob("part-*.parquet"))
    parquet = pq.ParquetFile(path)
    assert parquet.metadata.num_row_groups == -(-ROWS // PART_ROWS)
    codec = {"none": "UNCOMPRESSED", "gzip": "GZIP", "zstd": "ZSTD"}[compression]
    assert parquet.metadata.row_group(0).column(0).compression == codec
    src = DuckdbSource(f"duckdb:///{source}")
    try:
        schema = src.describe("kinds").schema
    finally:
        src.close()
    table = parquet.read()
    assert table.schema.remove_metadata().equals(schema.remove_metadata())
    for field in schema:
        assert table.schema.field(field.name).metadata == field.metadata
    # nanoseconds: as integers (Python's datetime holds microseconds)
    table = table.set_column(table.schema.get_field_index("tsn"), "tsn",
                             table.column("tsn").cast(pa.int64()))
    # JSON stays text in Parquet (logical type json); decimals and lists are typed
    rows = [{n: json.loads(v) if COLUMNS[n] == "json" and v is not None else v
             for n, v in row.items()} for row in table.to_pylist()]
    assert_same_rows(rows, expected)


def row_texts(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    """Every row as DuckDB's text of each value (JSON compared as parsed: its line
    breaks between tokens are written as spaces)."""
    select = ", ".join("CAST(j AS VARCHAR)" if c == "j" else f"CAST({c} AS VARCHAR)"
                       for c in COLUMNS)
    rows = con.execute(f"SELECT {select} FROM kinds ORDER BY id").fetchall()
    j = list(COLUMNS).index("j")
    return [(*r[:j], None if r[j] is None else json.loads(r[j]), *r[j + 1:]) for r in rows]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_sql_dump_loads_back_into_duckdb(source: Path, tmp_path: Path, compression: str) -> None:
    export(source, tmp_path, "sql", compression)
    dump = text_output(tmp_path, "sql", compression)
    assert dump.startswith("-- egress SQL dump of table kinds (duckdb)\n")
    target = duckdb.connect(":memory:")
    src = duckdb.connect(str(source), read_only=True)
    try:
        target.execute(dump)
        types = ("SELECT column_name, data_type, is_nullable FROM duckdb_columns() "
                 "WHERE table_name = 'kinds' ORDER BY column_index")
        assert target.execute(types).fetchall() == src.execute(types).fetchall()
        key = ("SELECT constraint_column_names FROM duckdb_constraints() "
               "WHERE table_name = 'kinds' AND constraint_type = 'PRIMARY KEY'")
        assert target.execute(key).fetchall() == [(["id"],)]
        assert row_texts(target) == row_texts(src)
    finally:
        target.close()
        src.close()
