"""SQLite → every format × every compression → read back with independent readers.

The source database holds every type egress promises for SQLite. The expected values
are computed from the raw SQLite values with the stdlib ``sqlite3`` module (not with
egress's own reader), and each output is read back with the stdlib (csv, json, gzip),
``zstandard`` and ``pyarrow.parquet``; SQL dumps are loaded with the ``sqlite3`` CLI.
Small parts and a small ``max_file_size`` make every table span several parts and files.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import gzip
import io
import json
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import zstandard

import egress

UTC = dt.UTC
FORMATS = ("csv", "jsonl", "json", "sql", "parquet")
COMPRESSIONS = ("none", "gzip", "zstd")

SCHEMA = """
CREATE TABLE everything (
  id INTEGER PRIMARY KEY,
  i INTEGER, r REAL, d DECIMAL(18,2), t TEXT, b BLOB, flag BOOLEAN,
  day DATE, at DATETIME, atz TIMESTAMPTZ, doc JSON
);
CREATE TABLE norowid (name TEXT, qty INTEGER);
CREATE TABLE composite (tenant TEXT, seq INTEGER, note TEXT, PRIMARY KEY (tenant, seq));
CREATE TABLE empty (id INTEGER PRIMARY KEY, v TEXT);
CREATE TABLE loose (id PRIMARY KEY, v TEXT);
CREATE TABLE events (at DATETIME PRIMARY KEY, n INTEGER);
CREATE TABLE prices (amount DECIMAL(12,3) PRIMARY KEY, label TEXT);
"""
KINDS = {
    "everything": {
        "id": "int", "i": "int", "r": "real", "d": "decimal2", "t": "text", "b": "blob",
        "flag": "bool", "day": "date", "at": "datetime", "atz": "tz", "doc": "json",
    },
    "norowid": {"name": "text", "qty": "int"},
    "composite": {"tenant": "text", "seq": "int", "note": "text"},
    "empty": {"id": "int", "v": "text"},
    "loose": {"id": "any", "v": "text"},
    "events": {"at": "datetime", "n": "int"},
    "prices": {"amount": "decimal3", "label": "text"},
}
#: Source order of each table, as SQLite itself orders it.
ORDER = {
    "everything": "id", "norowid": "rowid", "composite": "tenant, seq", "empty": "id",
    "loose": "id", "events": "at", "prices": "amount",
}
TEXTS = [
    "plain", "comma, here", 'say "hi"', "line1\nline2\r\nline3\rend",
    "\x01\x02\x07\x08\t\x0b\x0c\x1b\x1f\x7f", "", "héllo wörld — 日本語 🎉 \u2028\u2029",
    "  spaced  ", "NULL", "\\N", '"', ",", "\r", "\n", "00123", "true", "back\\slash",
]
EVERYTHING = [
    (0, 0.0, "0", b"", 0, "2024-01-01", "2024-01-01 00:00:00", "2024-01-01 00:00:00Z", "{}"),
    (2**63 - 1, 1.5, "12345678901234.56", b"\x00\x01\xff", 1, "1970-01-01",
     "2024-02-29T23:59:59.999999", "2024-06-30T12:00:00+02:00", '{"a": [1, 2, {"b": null}]}'),
    (-(2**63), 2.2250738585072014e-308, "-0.01", bytes(range(256)), 0, "0001-01-01",
     "9999-12-31 23:59:59", "2024-01-01 05:30:00-05:30", '[1, "two", 3.5, -1e300]'),
    (-1, float("inf"), "99.99", b'"quoted,blob\n', 1, "2000-02-29", "2024-01-02 03:04",
     "2024-01-02 03:04:05", '"just a string"'),
    (2**53 + 1, float("-inf"), "1234567890123456", b"\r\n", 0, "9999-12-31", "2024-01-01",
     "1969-12-31T23:59:59.5Z", "true"),
    (42, 0.1, "0.1", b"x" * 100, 1, "2024-12-31", "1969-12-31 23:59:59.5",
     "2024-03-10 02:30:00.000001+00:00", '{"s": "a\\nb\\u0001\\"q\\"", "k": "日本"}'),
    (7, 1 / 3, "-12345678901234.56", b"\x7f", 0, "2024-02-29", "2024-07-01 12:00:00Z",
     "2024-07-01T12:00:00.123-03:00", "12.5"),
    (-7, 1e300, "0.005e1", b"a", 1, "1999-12-31", "2000-01-01 00:00:00.000001",
     "2000-01-01 00:00:00+14:00", '{ "spaced" : [ 1 , 2 ] }'),
    (1, 5e-324, "7", b"\xff" * 3, 0, "2024-01-02", "2024-01-02T03:04:05",
     "2024-01-02T03:04:05-00:00", "[]"),
    (2, 1.7976931348623157e308, "3.14", b"\x00", 1, "2024-01-03", "2024-01-03 00:00:00.1",
     "2024-01-03 00:00:00.1Z", '{"n": 123456789012345678901234567890}'),
    (3, -123456789.123456789, "-0", b"z", 0, "2024-01-04", "2024-01-04 00:00:00",
     "2024-01-04 00:00:00Z", '{"f": 0.1}'),
]


def build_source(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    rows = []
    for n, base in enumerate(EVERYTHING):
        text = TEXTS[n % len(TEXTS)]
        rows.append((n + 1, base[0], base[1], base[2], text, *base[3:]))
    # the rest of the texts, in otherwise ordinary rows
    for n, text in enumerate(TEXTS[len(EVERYTHING) :], start=len(rows) + 1):
        rows.append((n, n, n / 8, f"{n}.25", text, bytes([n]), n % 2, "2024-05-05",
                     "2024-05-05 05:05:05", "2024-05-05 05:05:05Z", f'{{"n": {n}}}'))
    rows.append((len(rows) + 1, *([None] * 10)))  # NULL in every column
    conn.executemany("INSERT INTO everything VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.executemany(
        "INSERT INTO norowid VALUES (?, ?)",
        [("dup", 1), ("dup", 1), (None, None), ("", 0), ("z", 2**62), ("a", -5), ("dup", 1)],
    )
    conn.executemany(
        "INSERT INTO composite VALUES (?, ?, ?)",
        [(t, s, f"{t}-{s}") for t in ("b", "a", "é", "A", "a b") for s in (3, -1, 2, 10)],
    )
    # an untyped key holds integers, reals, texts and a blob: SQLite orders them by class
    conn.executemany(
        "INSERT INTO loose VALUES (?, ?)",
        [(10, "int"), (2, "int"), ("abc", "text"), ("10", "text"), (2.5, "real"),
         (b"bl", "blob"), ("", "empty"), (-3, "neg"), ("Z", "text"), (1e16, "big")],
    )
    conn.executemany(
        "INSERT INTO events VALUES (?, ?)",
        # distinct instants in SQLite's formats, ordered as SQLite orders their text
        [("2024-01-01 00:00:00", 1), ("2024-01-01T00:00:00.25", 2), ("2024-01-01 00:00:00.5", 3),
         ("2024-01-01 00:00:01", 4), ("2023-12-31 23:59:59", 5), ("2024-01-01T00:00:02Z", 6),
         ("2024-01-01 00:03", 7), ("2024-01-02", 8), ("2024-01-01T00:00:04+01:00", 9)],
    )
    conn.executemany(
        "INSERT INTO prices VALUES (?, ?)",
        [(v, f"p{v}") for v in ("0.001", "1", "1.5", "-2.25", "123456789.123", "0.1", "0.2",
                                 "123456789", "-0.001")],
    )
    conn.commit()
    conn.close()


# --- the expected values, from the raw SQLite values --------------------------------------


def parse_datetime(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:  # SQLite's rule: an offset means "convert to UTC"
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def parse_tz(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:  # no offset: UTC, as SQLite's date functions take it
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def as_decimal(raw: int | float | str, places: int) -> decimal.Decimal:
    value = decimal.Decimal(repr(raw) if isinstance(raw, float) else str(raw))
    return value.quantize(decimal.Decimal(1).scaleb(-places))


def expected_value(kind: str, raw: Any) -> Any:
    if raw is None:
        return None
    convert: dict[str, Callable[[Any], Any]] = {
        "int": int, "real": float, "text": str, "blob": bytes, "bool": bool,
        "decimal2": lambda v: as_decimal(v, 2), "decimal3": lambda v: as_decimal(v, 3),
        "date": dt.date.fromisoformat, "datetime": parse_datetime, "tz": parse_tz,
        # a JSON column has NUMERIC affinity: a number in it is stored as one
        "json": lambda v: json.loads(v) if isinstance(v, str) else v,
        "any": lambda v: v,  # kept with its storage class
    }
    return convert[kind](raw)


def expected_rows(db: Path, table: str, order: str | None = None) -> list[list[Any]]:
    kinds = KINDS[table]
    conn = sqlite3.connect(db)
    try:
        cols = ", ".join(f'"{c}"' for c in kinds)
        order = order or ORDER[table]
        raw = conn.execute(f'SELECT {cols} FROM "{table}" ORDER BY {order}').fetchall()
    finally:
        conn.close()
    return [[expected_value(k, v) for k, v in zip(kinds.values(), row, strict=True)] for row in raw]


# --- reading the output back ---------------------------------------------------------------


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        # one stream: every concatenated member, as gzip -d reads it
        out = gzip.decompress(data)
        assert subprocess.run(["gzip", "-dc"], input=data, capture_output=True, check=True
                              ).stdout == out
        return out
    if compression == "zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        )
        out = reader.read()
        if shutil.which("zstd"):
            assert subprocess.run(["zstd", "-dc"], input=data, capture_output=True,
                                  check=True).stdout == out
        return out
    return data


_UNQUOTED = re.compile(r'[^,\r\n"]*')


def parse_csv(text: str) -> list[list[str | None]]:
    """RFC 4180 rows, with an unquoted empty field read as None (the stdlib cannot)."""
    rows: list[list[str | None]] = []
    row: list[str | None] = []
    i = 0
    while i < len(text):
        value: str | None
        if text[i] == '"':
            j, pieces = i + 1, []
            while True:
                k = text.index('"', j)
                pieces.append(text[j:k])
                if text.startswith('"', k + 1):
                    pieces.append('"')
                    j = k + 2
                else:
                    i = k + 1
                    break
            value = "".join(pieces)
        else:
            m = _UNQUOTED.match(text, i)
            assert m is not None
            value, i = m.group() or None, m.end()
        row.append(value)
        if text.startswith(",", i):
            i += 1
            continue
        assert text.startswith("\r\n", i), f"bad CSV at {i}: {text[i:i + 20]!r}"
        rows.append(row)
        row, i = [], i + 2
    assert not row
    return rows


def csv_value(kind: str, text: str | None) -> Any:
    if text is None:
        return None
    decode: dict[str, Callable[[str], Any]] = {
        "int": int, "real": float, "text": str, "any": str, "bool": {"true": True,
                                                                     "false": False}.__getitem__,
        "blob": lambda s: bytes.fromhex(s.removeprefix("\\x")) if s.startswith("\\x") else 1 / 0,
        "decimal2": decimal.Decimal, "decimal3": decimal.Decimal,
        "date": dt.date.fromisoformat, "datetime": dt.datetime.fromisoformat,
        "tz": dt.datetime.fromisoformat, "json": json.loads,
    }
    return decode[kind](text)


def json_value(kind: str, value: Any) -> Any:
    if value is None or kind == "json":
        return value
    decode: dict[str, Callable[[Any], Any]] = {
        "int": lambda v: v if type(v) is int else 1 / 0,
        "real": lambda v: float(v) if not isinstance(v, str) else
        {"Infinity": float("inf"), "-Infinity": float("-inf")}[v],
        "text": str, "any": lambda v: v, "bool": lambda v: v if type(v) is bool else 1 / 0,
        "blob": base64.b64decode, "decimal2": decimal.Decimal, "decimal3": decimal.Decimal,
        "date": dt.date.fromisoformat, "datetime": dt.datetime.fromisoformat,
        "tz": dt.datetime.fromisoformat,
    }
    return decode[kind](value)


def storage_classes(db: Path, table: str, order: str) -> list[tuple[str, ...]]:
    conn = sqlite3.connect(db)
    try:
        cols = ", ".join(f'typeof("{c}")' for c in KINDS[table])
        return conn.execute(f'SELECT {cols} FROM "{table}" ORDER BY {order}').fetchall()
    finally:
        conn.close()


def read_table(out: Path, files: list[str], table: str, fmt: str, compression: str,
               scratch: Path, source: Path) -> list[list[Any]]:
    kinds = KINDS[table]
    rows: list[list[Any]] = []
    if fmt == "sql":
        db = scratch / f"{table}-loaded.db"
        db.unlink(missing_ok=True)
        for name in files:
            script = decompress((out / name).read_bytes(), compression)
            subprocess.run(["sqlite3", "-bail", str(db)], input=script, check=True,
                           capture_output=True)
        # each value keeps its storage class
        assert storage_classes(db, table, "rowid") == storage_classes(source, table, ORDER[table])
        # rows were inserted in the order of the export
        return expected_rows(db, table, order="rowid")
    for name in files:
        path = out / name
        if fmt == "parquet":
            assert path.name.endswith(".parquet")
            data = pq.read_table(path)
            assert data.column_names == list(kinds)
            for row in data.to_pylist():
                rows.append([json.loads(v) if k == "json" and v is not None else v
                             for k, v in zip(kinds.values(), row.values(), strict=True)])
            continue
        suffix = {"none": "", "gzip": ".gz", "zstd": ".zst"}[compression]
        assert path.name.endswith(f".{fmt}{suffix}")
        text = decompress(path.read_bytes(), compression).decode("utf-8")
        if fmt == "csv":
            parsed = parse_csv(text)
            stdlib = list(csv.reader(io.StringIO(text, newline="")))
            # the stdlib reads the same fields; only it cannot tell NULL from ""
            assert [[v or "" for v in r] for r in parsed] == [
                r if r else [""] for r in stdlib]
            assert parsed[0] == list(kinds)
            rows += [[csv_value(k, v) for k, v in zip(kinds.values(), r, strict=True)]
                     for r in parsed[1:]]
        elif fmt == "jsonl":
            assert text == "" or text.endswith("\n")
            for line in text.split("\n")[:-1]:  # not splitlines: U+2028 is no line end
                obj = json.loads(line)
                assert list(obj) == list(kinds)
                rows.append([json_value(k, obj[c]) for c, k in kinds.items()])
        else:
            for obj in json.loads(text):
                assert list(obj) == list(kinds)
                rows.append([json_value(k, obj[c]) for c, k in kinds.items()])
    return rows


def as_written(fmt: str, kind: str, value: Any) -> Any:
    """A value of any storage class as a format can hold it: text in CSV and Parquet, a
    JSON value in JSON (a blob as base64), itself in a SQL dump."""
    if kind != "any" or value is None or fmt == "sql":
        return value
    if fmt in ("json", "jsonl"):
        return base64.b64encode(value).decode() if isinstance(value, bytes) else value
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return repr(value) if isinstance(value, float) else str(value)


def assert_same(got: list[list[Any]], want: list[list[Any]], table: str, fmt: str) -> None:
    assert len(got) == len(want), f"{table}: {len(got)} rows, expected {len(want)}"
    for n, (g_row, w_row) in enumerate(zip(got, want, strict=True)):
        for (column, kind), g, w in zip(KINDS[table].items(), g_row, w_row, strict=True):
            w = as_written(fmt, kind, w)
            assert type(g) is type(w) and g == w, f"{table} row {n} {column}: {g!r} != {w!r}"
            if isinstance(w, dt.datetime):
                assert (g.tzinfo is None) == (w.tzinfo is None), f"{table} {column}: tz"


EMPTY_FILES = {"csv": b"id,v\r\n", "jsonl": b"", "json": b"[\n]\n"}


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_table_gives_one_valid_file(source_db: Path, tmp_path: Path, fmt: str,
                                          compression: str) -> None:
    out = tmp_path / "out"
    result = egress.export(f"sqlite:///{source_db}", ["empty"], to=out, format=fmt,
                           compression=compression, fsync=False)
    assert result.manifest is not None
    (entry,) = result.manifest["files"]
    assert entry["rows"] == 0 and entry["parts"] == 1
    raw = (out / entry["name"]).read_bytes()
    assert len(raw) == entry["bytes"]
    if fmt == "parquet":
        data = pq.read_table(out / entry["name"])
        assert data.num_rows == 0 and data.column_names == ["id", "v"]
        return
    if compression != "none":
        assert raw, "an empty compressed file must still be a valid stream"
    text = decompress(raw, compression)
    if fmt == "sql":
        db = tmp_path / "loaded.db"
        subprocess.run(["sqlite3", "-bail", str(db)], input=text, check=True)
        assert sqlite3.connect(db).execute('SELECT count(*) FROM "empty"').fetchone() == (0,)
    else:
        assert text == EMPTY_FILES[fmt]


@pytest.fixture(scope="module")
def source_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("src") / "source.db"
    build_source(path)
    return path


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_roundtrip(source_db: Path, tmp_path: Path, fmt: str, compression: str) -> None:
    out = tmp_path / "out"
    result = egress.export(
        f"sqlite:///{source_db}", list(KINDS), to=out, format=fmt, compression=compression,
        part_rows=3, max_file_size=1000 if fmt == "sql" else 200, fsync=False,
    )
    assert not result.interrupted and result.manifest is not None
    tables = {t["table"]: t for t in result.manifest["tables"]}
    if fmt != "parquet":  # (a Parquet part is a file of its own)
        # files of several parts: each part's gzip member / zstd frame follows the last
        assert any(f["parts"] > 1 for f in result.manifest["files"])
    for table in KINDS:
        want = expected_rows(source_db, table)
        files = tables[table]["files"]
        assert files, f"{table}: no file"
        entries = [f for f in result.manifest["files"] if f["table"] == table]
        assert [f["name"] for f in entries] == files
        if table == "everything":
            assert len(files) > 1, f"{table}: expected several files"
        if len(want) > 3:
            assert sum(f["parts"] for f in entries) > 1, f"{table}: expected several parts"
        got = read_table(out, files, table, fmt, compression, tmp_path, source_db)
        assert_same(got, want, table, fmt)
        assert tables[table]["rows"] == len(want) == sum(f["rows"] for f in entries)
