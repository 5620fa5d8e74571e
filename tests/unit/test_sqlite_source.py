"""SqliteSource on real SQLite files: type mapping, exact cursors, errors."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from egress.exceptions import (
    DataError,
    NoUsableKeyError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources import open_source
from egress.sources.base import TableInfo
from egress.sources.sqlite import BATCH_ROWS, DYNAMIC, ROWID, SqliteSource, map_declared_type

UTC = dt.UTC


def make(tmp_path: Path, script: str, rows: dict[str, list[tuple]] | None = None) -> str:
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(script)
    for table, values in (rows or {}).items():
        marks = ", ".join("?" for _ in values[0])
        conn.executemany(f'INSERT INTO "{table}" VALUES ({marks})', values)
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


@pytest.fixture
def opened() -> Iterator[list[SqliteSource]]:
    sources: list[SqliteSource] = []
    yield sources
    for s in sources:
        s.close()


def source_for(opened: list[SqliteSource], url: str) -> SqliteSource:
    opened.append(SqliteSource(url))
    return opened[-1]


def read_all(source: SqliteSource, info: TableInfo, limit: int) -> list[dict[str, Any]]:
    """Every row by keyset pagination, ``limit`` rows at a time, as the engine reads."""
    rows: list[dict[str, Any]] = []
    after = None
    while True:
        got = 0
        for batch in source.read(info, after, limit):
            got += batch.num_rows
            rows += batch.select(info.column_names).to_pylist()
            after = tuple(batch.column(k)[-1].as_py() for k in info.key_columns)
        if got < limit:
            return rows


@pytest.mark.parametrize(("declared", "arrow_type", "logical"), [
    ("INTEGER", pa.int64(), None), ("BIGINT UNSIGNED", pa.int64(), None),
    ("REAL", pa.float64(), None), ("DOUBLE PRECISION", pa.float64(), None),
    ("FLOAT", pa.float64(), None), ("TEXT", pa.string(), None),
    ("VARCHAR(20)", pa.string(), None), ("CLOB", pa.string(), None),
    ("BLOB", pa.binary(), None), ("BOOLEAN", pa.bool_(), None), ("DATE", pa.date32(), None),
    ("DATETIME", pa.timestamp("us"), None), ("TIMESTAMP", pa.timestamp("us"), None),
    ("TIMESTAMPTZ", pa.timestamp("us", tz="UTC"), None),
    ("decimal(10, 2)", pa.decimal128(10, 2), None), ("NUMERIC(38)", pa.decimal128(38, 0), None),
    ("NUMERIC(50,2)", pa.string(), "decimal"), ("NUMERIC", pa.string(), "decimal"),
    ("JSON", pa.string(), "json"), ("", DYNAMIC, None), ("STRING", DYNAMIC, None),
])
def test_declared_type_mapping(declared: str, arrow_type: pa.DataType, logical: str | None
                               ) -> None:
    m = map_declared_type(declared)
    assert m.arrow_type == arrow_type and m.logical_type == logical


def test_describe(tmp_path: Path, opened: list[SqliteSource]) -> None:
    url = make(tmp_path, """
        CREATE TABLE a (id INTEGER PRIMARY KEY, name TEXT NOT NULL, note);
        CREATE TABLE b (x TEXT, y INTEGER);
        CREATE TABLE c (k2 TEXT, k1 INTEGER, v, PRIMARY KEY (k1, k2)) WITHOUT ROWID;
        CREATE TABLE d (rowid TEXT, v INTEGER);
        CREATE TABLE e (rowid TEXT, _rowid_ TEXT, oid TEXT);
    """, {"a": [(1, "x", None), (2, "y", 3)]})
    s = source_for(opened, url)
    assert s.tables() == ["a", "b", "c", "d", "e"]
    a = s.describe("a")
    assert a.key_columns == ("id",) and a.primary_key == ("id",) and a.hidden_columns == ()
    assert [c.nullable for c in a.columns] == [False, False, True]
    assert a.row_estimate == 2
    b = s.describe("b")
    assert b.key_columns == (ROWID,) and b.hidden_columns == (ROWID,) and b.primary_key == ()
    c = s.describe("c")
    assert c.primary_key == ("k1", "k2")
    # the TEXT key is carried raw (with its storage class) in a hidden column
    assert c.key_columns[0] == "k1" and c.key_columns[1] in c.hidden_columns
    assert s.describe("d").key_columns == (ROWID,)  # reached through _rowid_
    with pytest.raises(NoUsableKeyError, match="rowid, _rowid_ and oid"):
        s.describe("e")


def test_rowid_behind_a_column_named_rowid(tmp_path: Path, opened: list[SqliteSource]) -> None:
    url = make(tmp_path, "CREATE TABLE d (rowid TEXT, v INTEGER);",
               {"d": [("z", 1), ("a", 2), ("m", 3)]})
    s = source_for(opened, url)
    info = s.describe("d")
    assert read_all(s, info, 1) == [{"rowid": "z", "v": 1}, {"rowid": "a", "v": 2},
                                    {"rowid": "m", "v": 3}]


def test_untyped_key_of_every_storage_class(tmp_path: Path, opened: list[SqliteSource]) -> None:
    values = [10, 2, "abc", "10", 2.5, b"bl", b"", "", -3, 1e16, 2**63 - 1, "Z", b"\x00"]
    url = make(tmp_path, "CREATE TABLE t (k PRIMARY KEY, n INTEGER);",
               {"t": [(v, i) for i, v in enumerate(values)]})
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        want = [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k")]
    s = source_for(opened, url)
    info = s.describe("t")
    assert info.key_columns == ("k",) and info.hidden_columns == ()
    for limit in (1, 2, 3, 100):
        got = [r["k"] for r in read_all(s, info, limit)]
        assert got == want  # each value once, with its own type, in SQLite's order
        assert [type(v) for v in got] == [type(v) for v in want]


def test_datetime_key_pages_by_its_stored_text(tmp_path: Path, opened: list[SqliteSource]
                                              ) -> None:
    stamps = ["2024-01-01 00:00:00", "2024-01-01T00:00:00.25", "2024-01-01 00:00:01",
              "2023-12-31 23:59:59", "2024-01-01T00:00:02Z", "2024-01-01 00:03",
              "2024-01-02", "2024-01-01T01:00:04+01:00"]
    url = make(tmp_path, "CREATE TABLE ev (at DATETIME PRIMARY KEY, n INTEGER);",
               {"ev": [(t, i) for i, t in enumerate(stamps)]})
    s = source_for(opened, url)
    info = s.describe("ev")
    rows = read_all(s, info, 1)
    assert [r["n"] for r in rows] == [3, 0, 2, 5, 1, 4, 7, 6]  # SQLite's text order
    assert [r["at"] for r in rows] == [
        dt.datetime(2023, 12, 31, 23, 59, 59), dt.datetime(2024, 1, 1),
        dt.datetime(2024, 1, 1, 0, 0, 1), dt.datetime(2024, 1, 1, 0, 3),
        dt.datetime(2024, 1, 1, 0, 0, 0, 250000), dt.datetime(2024, 1, 1, 0, 0, 2),
        # an offset is converted to UTC, a date alone is midnight
        dt.datetime(2024, 1, 1, 0, 0, 4), dt.datetime(2024, 1, 2)]


def test_decimal_and_text_keys(tmp_path: Path, opened: list[SqliteSource]) -> None:
    url = make(tmp_path, """
        CREATE TABLE p (amount DECIMAL(12,2) PRIMARY KEY);
        CREATE TABLE t (code TEXT PRIMARY KEY);
    """, {
        "p": [(v,) for v in ("0.1", "0.2", "12345678.91", "-2.5", "7", "1e2", "0.15")],
        "t": [("b",), ("a",), (b"blob",), ("",), ("é",)],  # a blob in a TEXT key
    })
    s = source_for(opened, url)
    p = read_all(s, s.describe("p"), 1)
    assert [r["amount"] for r in p] == [decimal.Decimal(v) for v in
                                        ("-2.50", "0.10", "0.15", "0.20", "7.00", "100.00",
                                         "12345678.91")]
    t = read_all(s, s.describe("t"), 2)
    assert [r["code"] for r in t] == ["", "a", "b", "é", "blob"]


def test_real_in_decimal_column_rounds_to_the_declared_scale(
    tmp_path: Path, opened: list[SqliteSource]
) -> None:
    # what an application computing in floats stores in a DECIMAL(12,2) column
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, a DECIMAL(12,2));",
               {"t": [(1, 3 * 12.34), (2, 0.1 + 0.2), (3, "1234567890.25"), (4, 1e9)]})
    s = source_for(opened, url)
    rows = read_all(s, s.describe("t"), 10)
    assert [r["a"] for r in rows] == [decimal.Decimal(v) for v in
                                      ("37.02", "0.30", "1234567890.25", "1000000000.00")]


def test_values_of_each_type(tmp_path: Path, opened: list[SqliteSource]) -> None:
    url = make(tmp_path, """
        CREATE TABLE v (id INTEGER PRIMARY KEY, d DECIMAL(18,2), tz TIMESTAMPTZ, b BOOLEAN,
                        j JSON, any, r REAL);
    """, {"v": [
        (1, "12345678901234.56", "2024-01-01 10:00:00+02:00", 1, '{ "a" : 1 }', 5, 1.5),
        (2, 3, "2024-01-01 10:00:00", 0, "[1, 2]", "five", None),
        (3, None, None, None, None, b"\x05", float("inf")),
        (4, "-0.01", "2024-01-01T10:00:00.5Z", "true", "3.5", 5.5, -0.0),
    ]})
    s = source_for(opened, url)
    rows = read_all(s, s.describe("v"), 10)
    assert [r["d"] for r in rows] == [decimal.Decimal("12345678901234.56"),
                                      decimal.Decimal("3.00"), None, decimal.Decimal("-0.01")]
    assert [r["tz"] for r in rows] == [
        dt.datetime(2024, 1, 1, 8, tzinfo=UTC), dt.datetime(2024, 1, 1, 10, tzinfo=UTC), None,
        dt.datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=UTC)]
    assert [r["b"] for r in rows] == [True, False, None, True]
    assert [r["j"] for r in rows] == ['{"a":1}', "[1,2]", None, "3.5"]
    assert [r["any"] for r in rows] == [5, "five", b"\x05", 5.5]
    assert [r["r"] for r in rows][:3] == [1.5, None, float("inf")]


def test_a_long_run_of_nulls_before_the_first_value(tmp_path: Path, opened: list[SqliteSource]
                                                   ) -> None:
    rows = [(i, None, None) for i in range(40_000)] + [(40_000, 2.5, "2024-01-01")]
    url = make(tmp_path, "CREATE TABLE n (id INTEGER PRIMARY KEY, r REAL, d DATE);", {"n": rows})
    s = source_for(opened, url)
    info = s.describe("n")
    batches = list(s.read(info, None, 100_000))
    # the driver infers types from the first rows: the dummy row makes them the declared ones
    assert len(batches) > 1
    assert all(b.schema.types == [pa.int64(), pa.float64(), pa.date32()] for b in batches)
    last = batches[-1].to_pylist()[-1]
    assert last == {"id": 40_000, "r": 2.5, "d": dt.date(2024, 1, 1)}


@pytest.mark.parametrize(("declared", "value", "stored"), [
    ("INTEGER", 2.5, "the real '2.5'"),
    ("INTEGER", "abc", "the text 'abc'"),
    ("REAL", "x" * 100, "the text '" + "x" * 40 + "'"),
    ("BIGINT", b"\x01\xff", "the blob X'01FF'"),
], ids=["integer-real", "integer-text", "real-long-text", "bigint-blob"])
@pytest.mark.parametrize("primary_key", [True, False])
def test_a_value_past_the_drivers_first_rows_that_does_not_fit_is_named(
    tmp_path: Path, opened: list[SqliteSource], declared: str, value: Any, stored: str,
    primary_key: bool,
) -> None:
    # the driver types a column from its first rows and fails the stream on a later value
    # of another storage class with "Type mismatch", naming no column: egress finds it
    key = "INTEGER PRIMARY KEY" if primary_key else "INTEGER"
    rows = [(i, i) for i in range(1, 40_000)] + [(40_000, value)]
    url = make(tmp_path, f"CREATE TABLE t (id {key}, c {declared});", {"t": rows})
    s = source_for(opened, url)
    with pytest.raises(DataError) as caught:
        read_all(s, s.describe("t"), 100_000)
    assert (f"cannot read table 't': column 'c': a value cannot be read as {declared}: "
            f"the row with key (40000,) holds {stored}") in str(caught.value)


@pytest.mark.parametrize(("declared", "value", "message"), [
    ("DATE", "not a date", "column 'c': a value cannot be read as DATE"),
    ("DECIMAL(5,2)", "123456", "cannot be read as DECIMAL\\(5,2\\)"),
    ("JSON", "{not json", "malformed JSON"),
    ("INTEGER", "abc", "cannot be read as INTEGER"),
    ("TEXT", b"\xff\x00", "cannot be read as TEXT .* Invalid UTF8"),
    ("", b"x", None),  # a blob in an untyped column is a blob: fine
    ("DATETIME", 1700000000, "cannot be read as DATETIME \\(timestamp\\[us\\]\\)"),
    ("DATETIME", "2024-01-01 00:00:00.123456789", "cannot be read as DATETIME"),
    ("BOOLEAN", "maybe", "cannot be read as BOOLEAN"),
])
def test_values_that_do_not_fit_their_type(tmp_path: Path, opened: list[SqliteSource],
                                           declared: str, value: Any, message: str | None
                                           ) -> None:
    url = make(tmp_path, f"CREATE TABLE t (id INTEGER PRIMARY KEY, c {declared});",
               {"t": [(1, value)]})
    s = source_for(opened, url)
    if message is None:
        assert read_all(s, s.describe("t"), 10) == [{"id": 1, "c": value}]
        return
    with pytest.raises(DataError, match=message):
        read_all(s, s.describe("t"), 10)


def test_booleans_of_every_storage_class(tmp_path: Path, opened: list[SqliteSource]) -> None:
    url = make(tmp_path, "CREATE TABLE b (id INTEGER PRIMARY KEY, f BOOLEAN);",
               {"b": [(1, 0), (2, 1), (3, 2), (4, 0.5), (5, "false"), (6, "true"), (7, None)]})
    s = source_for(opened, url)
    assert [r["f"] for r in read_all(s, s.describe("b"), 10)] == [
        False, True, True, True, False, True, None]


def test_errors(tmp_path: Path, opened: list[SqliteSource]) -> None:
    url = make(tmp_path, "CREATE TABLE events (id INTEGER PRIMARY KEY);")
    s = source_for(opened, url)
    with pytest.raises(TableNotFoundError, match="did you mean events"):
        s.describe("event")
    with pytest.raises(SourceUnavailableError, match="no such file"):
        SqliteSource(f"sqlite:///{tmp_path / 'missing.db'}")
    with pytest.raises(SourceError, match="not a SQLite URL"):
        SqliteSource("sqlite:/relative")
    opened.append(open_source(url))  # type: ignore[arg-type]
    assert opened[-1].tables() == ["events"]


def test_a_path_with_uri_characters(tmp_path: Path, opened: list[SqliteSource]) -> None:
    folder = tmp_path / "we ird#dir?x%20"
    folder.mkdir()
    with sqlite3.connect(folder / "a.db") as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.close()
    s = source_for(opened, f"sqlite:///{folder / 'a.db'}")
    assert s.tables() == ["t"]
    # nothing was opened (or created) at a path cut short by the '#' or the '?'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["we ird#dir?x%20"]


def test_a_decimal_column_of_reals_reads_as_their_rounded_text_would(
    tmp_path: Path, opened: list[SqliteSource]
) -> None:
    # a batch of REALs alone converts without text; it must agree with the text path
    rng = random.Random(7)
    values = [round(rng.uniform(-1e9, 1e9), rng.choice((0, 1, 2, 3, 6))) for _ in range(3000)]
    values += [0.1 + 0.2, 3 * 12.34, 1.005, 2.675, -0.005, 999999999.99, -0.0, 5e-324]
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, a DECIMAL(12,2));",
               {"t": list(enumerate(values))})
    s = source_for(opened, url)
    rows = read_all(s, s.describe("t"), 10_000)
    # the text path: the shortest text of the double rounded to the scale (by Arrow, whose
    # half-way cases follow the double times 10**scale, not Python's round)
    rounded = pc.round(pa.array(values), ndigits=2).to_pylist()
    expected = [decimal.Decimal(repr(v)).quantize(decimal.Decimal("0.01")) for v in rounded]
    assert [r["a"] for r in rows] == expected


def full_selection_only(source: SqliteSource, table: str) -> SqliteSource:
    """``source`` reading ``table`` as if its number columns held other storage classes."""
    source._mixed.add(table)
    return source


@pytest.mark.parametrize("odd", ["true", "12.5", "1e2", b"\x01"])
@pytest.mark.parametrize("where", [3, BATCH_ROWS + 100, 25_000])
@pytest.mark.parametrize("column", ["flag", "amount"])
def test_number_columns_read_the_same_whatever_class_a_value_has_and_wherever(
    tmp_path: Path, opened: list[SqliteSource], odd: Any, where: int, column: str
) -> None:
    # Number columns (BOOLEAN, DECIMAL(p,s)) are first read without typeof(); a text or
    # blob in one, within the driver's first rows or past them, sends the rest of the
    # read to the full selection: the values must be those the full one reads.
    rng = random.Random(where)
    rows = [(i, rng.choice((0, 1, 2, 0.5, None)), rng.choice((7, -3, 12.345, 0.1, None)))
            for i in range(1, 30_001)]
    i, flag, amount = rows[where]
    rows[where] = (i, odd, amount) if column == "flag" else (i, flag, odd)
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, flag BOOLEAN, "
                         "amount DECIMAL(12,2));", {"t": rows})
    fast, full = source_for(opened, url), source_for(opened, url)
    full_selection_only(full, "t")
    outcomes = []
    for s in (fast, full):
        try:
            outcomes.append(read_all(s, s.describe("t"), 20_000))
        except DataError as exc:
            outcomes.append(str(exc).split(":")[0])  # which column failed
    assert outcomes[0] == outcomes[1]
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        stored = conn.execute(f"SELECT typeof({column}) FROM t WHERE id = ?", (i,)).fetchone()
    conn.close()
    # a numeric text is stored as a number (the column's affinity): only 'true' and the
    # blob are another class, and are noticed, not read as numbers
    assert ("t" in fast._mixed) == (stored[0] in ("text", "blob"))
    # a blob is no boolean nor decimal, 'true' no decimal: a DataError either way
    if odd != b"\x01" and (odd, column) != ("true", "amount"):
        assert len(outcomes[0]) == 30_000


def test_a_table_of_numbers_is_read_with_the_fast_selection(
    tmp_path: Path, opened: list[SqliteSource]
) -> None:
    rows = [(i, i % 3, [7, 0.5, -12.345, None, 2**40][i % 5]) for i in range(1, 20_001)]
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, flag BOOLEAN, "
                         "amount DECIMAL(15,2));", {"t": rows})
    fast, full = source_for(opened, url), source_for(opened, url)
    got = read_all(fast, fast.describe("t"), 7_000)
    assert "t" not in fast._mixed
    full_selection_only(full, "t")
    assert got == read_all(full, full.describe("t"), 7_000)
    assert got[0] == {"id": 1, "flag": True, "amount": decimal.Decimal("0.50")}
    assert got[3]["amount"] == decimal.Decimal(2**40)


@pytest.mark.parametrize("declared", ["DECIMAL(12,2)", "DECIMAL(15,0)"])
def test_an_integer_too_large_for_a_decimal_column_fails_either_way(
    tmp_path: Path, opened: list[SqliteSource], declared: str
) -> None:
    url = make(tmp_path, f"CREATE TABLE t (id INTEGER PRIMARY KEY, a {declared});",
               {"t": [(1, 5), (2, 2**53 + 1)]})
    for s in (source_for(opened, url), full_selection_only(source_for(opened, url), "t")):
        with pytest.raises(DataError, match="cannot be read as DECIMAL"):
            read_all(s, s.describe("t"), 10)


def test_a_text_boolean_past_the_drivers_first_rows(tmp_path: Path, opened: list[SqliteSource]
                                                    ) -> None:
    # the driver fixes a column's type from its first rows; the full selection of a
    # BOOLEAN was an integer there and failed the page on a later 'true' (a type mismatch)
    rows = [(i, i % 2) for i in range(1, 20_001)]
    rows[19_000] = (19_001, "true")
    url = make(tmp_path, "CREATE TABLE b (id INTEGER PRIMARY KEY, f BOOLEAN);", {"b": rows})
    for s in (source_for(opened, url), full_selection_only(source_for(opened, url), "b")):
        got = [r["f"] for r in read_all(s, s.describe("b"), 30_000)]
        assert got[19_000] is True
        assert got[:4] == [True, False, True, False]


@pytest.mark.parametrize("where", [3, 25_000])
@pytest.mark.parametrize("blob", [b"a\x00b", "héllo".encode(), b"\xff"])
def test_a_blob_in_a_text_column_reads_as_cast_makes_it(
    tmp_path: Path, opened: list[SqliteSource], where: int, blob: bytes
) -> None:
    rows: list[tuple[int, Any]] = [(i, f"t{i}") for i in range(1, 30_001)]
    rows[where] = (where + 1, blob)
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v VARCHAR(10));", {"t": rows})
    outcomes: list[Any] = []
    for s in (source_for(opened, url), full_selection_only(source_for(opened, url), "t")):
        try:
            outcomes.append(read_all(s, s.describe("t"), 20_000))
        except DataError as exc:
            outcomes.append(str(exc).split(":")[0])
    assert outcomes[0] == outcomes[1]
    if blob == b"\xff":
        assert outcomes[0] == "column 'v'"  # not UTF-8: a DataError either way
    else:
        assert outcomes[0][where]["v"] == blob.decode()


def test_a_table_whose_values_are_typed_as_declared_is_read_without_the_dummy_row(
    tmp_path: Path, opened: list[SqliteSource],
) -> None:
    # the dummy row costs the driver 13-42 % of its read: a table that does not need it
    # is read with the bare query, every page
    # (booleans stored as 0 and 1, and whole decimals, are integers to the driver where
    # the dummy row would make them doubles)
    rows = [(i, f"k{i % 7}", i / 4, f"2024-01-01 00:00:{i % 60:02d}", i % 3 or None,
             i % 2, i // 3 if i < 30_000 else i / 4) for i in range(1, 50_001)]
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, r REAL, "
                         "at DATETIME, n INTEGER, b BOOLEAN, d DECIMAL(12,2));", {"t": rows})
    s = source_for(opened, url)
    got = read_all(s, s.describe("t"), 20_000)
    assert [r["id"] for r in got] == list(range(1, 50_001))
    assert got[4] == {"id": 5, "k": "k5", "r": 1.25, "at": dt.datetime(2024, 1, 1, 0, 0, 5),
                      "n": 2, "b": True, "d": decimal.Decimal("1.00")}
    assert got[2]["n"] is None and got[1]["b"] is False
    assert got[-1]["d"] == decimal.Decimal("12500.00")
    assert "t" not in s._dummied
    # read with the dummy row, every value is the same
    dummied = source_for(opened, url)
    dummied._dummied.add("t")
    assert read_all(dummied, dummied.describe("t"), 20_000) == got


@pytest.mark.parametrize("declared", ["TEXT", "DATETIME", "DECIMAL(10,2)", "BLOB", ""])
def test_a_column_null_in_a_pages_first_rows_and_set_later(
    tmp_path: Path, opened: list[SqliteSource], declared: str,
) -> None:
    # read bare, the driver types the column int64 from its NULLs and fails the stream
    # at the first value: the page is read on from there with the dummy row, and so is
    # every later page of the table
    value = {"TEXT": "x", "DATETIME": "2024-01-02 03:04:05", "DECIMAL(10,2)": 2.5,
             "BLOB": b"\x00\x01", "": "x"}[declared]
    rows = [(i, None if i <= 20_000 else value) for i in range(1, 60_001)]
    url = make(tmp_path, f"CREATE TABLE t (id INTEGER PRIMARY KEY, c {declared});",
               {"t": rows})
    s = source_for(opened, url)
    info = s.describe("t")
    batches = list(s.read(info, None, 30_000))
    assert sum(b.num_rows for b in batches) == 30_000
    assert all(b.schema == batches[0].schema for b in batches)
    assert batches[0].schema.field("c").type == info.columns[1].arrow_type
    values = pa.Table.from_batches(batches).column("c").to_pylist()
    expected = {"DATETIME": dt.datetime(2024, 1, 2, 3, 4, 5),
                "DECIMAL(10,2)": decimal.Decimal("2.50")}.get(declared, value)
    assert values == [None] * 20_000 + [expected] * 10_000
    assert "t" in s._dummied
    rest = read_all(s, info, 30_000)
    assert [r["c"] for r in rest] == [None] * 20_000 + [expected] * 40_000


def test_a_column_null_in_every_row_is_read_bare(tmp_path: Path, opened: list[SqliteSource]
                                                 ) -> None:
    rows = [(i, None, None) for i in range(1, 40_001)]
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, c TEXT, d DECIMAL(10,2));",
               {"t": rows})
    s = source_for(opened, url)
    info = s.describe("t")
    batches = list(s.read(info, None, 50_000))
    assert [b.schema.field("c").type for b in batches] == [pa.string()] * len(batches)
    assert [b.schema.field("d").type for b in batches] == [pa.decimal128(10, 2)] * len(batches)
    assert pa.Table.from_batches(batches).column("d").null_count == 40_000
    assert "t" not in s._dummied


def test_a_resumed_page_read_otherwise_encodes_to_the_same_parquet(
    tmp_path: Path, opened: list[SqliteSource],
) -> None:
    # the uninterrupted run reads the second page with the dummy row (its first page
    # needed it), a resumed run bare: the batches are cut elsewhere, the part's bytes
    # are the same (formats/parquet.py cuts what it hands pyarrow on a grid)
    from egress.formats.parquet import ParquetFormat

    rows = [(i, None if i <= 20_000 else f"v{i}", i * 1.5) for i in range(1, 60_001)]
    url = make(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, c TEXT, r REAL);",
               {"t": rows})
    through, resumed = source_for(opened, url), source_for(opened, url)
    info = through.describe("t")
    list(through.read(info, None, 30_000))
    assert "t" in through._dummied
    second = list(through.read(info, (30_000,), 30_000))
    again = list(resumed.read(resumed.describe("t"), (30_000,), 30_000))
    assert "t" not in resumed._dummied
    assert [b.num_rows for b in second] != [b.num_rows for b in again]
    for fmt in (ParquetFormat("none", page_bytes=50_000, page_rows=10**6),
                ParquetFormat("zstd")):
        encoded = []
        for batches in (second, again):
            part = fmt.part_encoder(batches[0].schema, 0)
            for b in batches:
                part.add(b)
            encoded.append(part.finish())
        assert encoded[0] == encoded[1]
