"""The DuckDB source on real DuckDB files: catalog, keyset paging, filters, errors."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from egress.domain.keys import decode_key, encode_key
from egress.domain.predicate import Condition, Predicate
from egress.exceptions import (
    DataError,
    NoUsableKeyError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources import open_source
from egress.sources.base import TableInfo
from egress.sources.duckdb import ROWID, DuckdbSource

SETUP = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (id BIGINT PRIMARY KEY, name VARCHAR NOT NULL, price DECIMAL(10,2),
                    "at" TIMESTAMPTZ, day DATE, u UUID);  -- a reserved word
INSERT INTO items SELECT g, 'item ' || g, g * 1.25,
  TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '1 hour', DATE '2024-01-01' + g::INTEGER,
  uuid() FROM range(1, 101) r(g);
CREATE TABLE pairs (tenant VARCHAR, seq INTEGER, note VARCHAR, PRIMARY KEY (seq, tenant));
INSERT INTO pairs SELECT chr((65 + g % 3)::INTEGER), g // 3, 'n' || g FROM range(0, 30) r(g);
CREATE TABLE loose (v VARCHAR, n INTEGER);
INSERT INTO loose SELECT 'v' || g, g FROM range(0, 25) r(g);
CREATE TABLE moods (m mood PRIMARY KEY, n INTEGER);
INSERT INTO moods VALUES ('happy', 3), ('sad', 1), ('ok', 2);
CREATE TABLE nanos (t TIMESTAMP_NS PRIMARY KEY);
INSERT INTO nanos SELECT TIMESTAMP_NS '2024-01-01 00:00:00' + g * INTERVAL '1 second'
  FROM range(0, 5) r(g);
-- nanoseconds that a microsecond cursor would lose
INSERT INTO nanos VALUES ('2024-01-01 00:00:00.000000001'), ('2024-01-01 00:00:00.000000002');
CREATE TABLE shadow (rowid_x INTEGER, "ROWID" INTEGER);
CREATE TABLE infinite (id INTEGER PRIMARY KEY, d DATE, ts TIMESTAMP);
INSERT INTO infinite VALUES (1, '2024-01-01', '2024-01-01'), (2, 'infinity', NULL),
  (3, NULL, '-infinity');
CREATE TABLE midnight (id INTEGER PRIMARY KEY, t TIME);
INSERT INTO midnight VALUES (1, '24:00:00');
CREATE SCHEMA audit;
CREATE TABLE audit."odd ""name" (id INTEGER PRIMARY KEY);
INSERT INTO audit."odd ""name" VALUES (1), (2);
CREATE VIEW v AS SELECT 1 AS x;
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("duckdb") / "source.duckdb"
    con = duckdb.connect(str(path))
    con.execute(SETUP)
    con.close()
    return path


@pytest.fixture
def src(db: Path) -> Iterator[DuckdbSource]:
    source = open_source(f"duckdb:///{db}")
    assert isinstance(source, DuckdbSource)
    yield source
    source.close()


def read_all(src: DuckdbSource, info: TableInfo, limit: int,
             predicate: Predicate | None = None) -> list[dict[str, object]]:
    """Every row, page by page of ``limit`` rows, the cursor through the checkpoint's JSON."""
    rows: list[dict[str, object]] = []
    after = None
    while True:
        batches = list(src.read(info, after, limit, predicate))
        page = pa.Table.from_batches(batches, schema=batches[0].schema) if batches else None
        if page is None or page.num_rows == 0:
            return rows
        assert page.num_rows <= limit
        for i, field in enumerate(page.schema):  # Python's datetime holds no nanoseconds
            if field.type == pa.timestamp("ns"):
                page = page.set_column(i, field.name, page.column(i).cast(pa.int64()))
        rows += page.to_pylist()
        last = tuple(page.column(k)[-1].as_py() for k in info.key_columns)
        after = decode_key(encode_key(last))


def test_catalog(src: DuckdbSource) -> None:
    assert src.tables() == ['audit.odd "name', "infinite", "items", "loose", "midnight",
                            "moods", "nanos", "pairs", "shadow"]  # no views
    info = src.describe("items")
    assert info.primary_key == ("id",) and info.key_columns == ("id",)
    assert info.row_estimate == 100
    assert [(c.name, c.source_type, str(c.arrow_type), c.nullable) for c in info.columns] == [
        ("id", "BIGINT", "int64", False), ("name", "VARCHAR", "string", False),
        ("price", "DECIMAL(10,2)", "decimal128(10, 2)", True),
        ("at", "TIMESTAMP WITH TIME ZONE", "timestamp[us, tz=UTC]", True),
        ("day", "DATE", "date32[day]", True), ("u", "UUID", "string", True),
    ]
    assert src.describe("main.items").columns == info.columns
    assert src.describe('audit.odd "name').row_estimate == 2


def test_keyset_pages_in_key_order(src: DuckdbSource) -> None:
    info = src.describe("items")
    rows = read_all(src, info, 7)
    assert [r["id"] for r in rows] == list(range(1, 101))
    assert str(rows[0]["price"]) == "1.25"


def test_composite_key_in_its_declared_order(src: DuckdbSource) -> None:
    info = src.describe("pairs")
    assert info.key_columns == ("seq", "tenant")
    got = [(r["seq"], r["tenant"]) for r in read_all(src, info, 4)]
    assert got == sorted((g // 3, chr(65 + g % 3)) for g in range(30))


def test_table_without_primary_key_pages_by_rowid(src: DuckdbSource) -> None:
    info = src.describe("loose")
    assert info.key_columns == (ROWID,) and info.hidden_columns == (ROWID,)
    assert info.primary_key == ()
    rows = read_all(src, info, 6)
    assert [r["n"] for r in rows] == list(range(25))
    assert info.schema.names == ["v", "n"]  # the rowid is not output


def test_enum_key_pages_in_enum_order(src: DuckdbSource) -> None:
    info = src.describe("moods")
    assert info.hidden_columns == ("__egress_key_0",)
    assert [r["m"] for r in read_all(src, info, 1)] == ["sad", "ok", "happy"]


def test_nanosecond_key_keeps_its_nanoseconds(src: DuckdbSource) -> None:
    info = src.describe("nanos")
    rows = read_all(src, info, 1)
    assert len(rows) == 7  # paging by a microsecond cursor would skip or repeat rows
    assert [r["t"] for r in rows][:3] == [1704067200 * 10**9 + n for n in (0, 1, 2)]
    assert [r["__egress_key_0"] for r in rows][:3] == [
        "2024-01-01 00:00:00", "2024-01-01 00:00:00.000000001", "2024-01-01 00:00:00.000000002"]


def test_filters_are_bound_values(src: DuckdbSource) -> None:
    info = src.describe("items")
    predicate = Predicate((
        Condition("price", ">=", "12.50"), Condition("at", "<", "2024-01-01T15:00:00+02:00"),
        Condition("name", "!=", "item 11"), Condition("day", "in", ("2024-01-11", "2024-01-12",
                                                                    "2024-01-13")),
    ))
    # 13:00 UTC is id 13; the offset is applied, not dropped
    assert [r["id"] for r in read_all(src, info, 2, predicate)] == [10, 12]
    hostile = Predicate((Condition("name", "=", "x' OR '1'='1"),))
    assert read_all(src, info, 10, hostile) == []
    uuid_text = Predicate((Condition("u", "=", "not-a-uuid"),))
    assert read_all(src, info, 10, uuid_text) == []  # text filters compare the text


def test_timestamptz_cursor_and_values(src: DuckdbSource) -> None:
    info = src.describe("items")
    (batch,) = src.read(info, (99,), 5)
    assert batch.column("at").to_pylist() == [dt.datetime(2024, 1, 5, 4, tzinfo=dt.UTC)]


def test_unknown_table_lists_the_known_ones(src: DuckdbSource) -> None:
    with pytest.raises(TableNotFoundError, match="item"):
        src.describe("itemz")
    with pytest.raises(TableNotFoundError):
        src.describe('items"; DROP TABLE items; --')
    with pytest.raises(TableNotFoundError):
        src.describe("v")  # a view is not a table


def test_rowid_hidden_by_a_column_is_a_clear_error(src: DuckdbSource) -> None:
    with pytest.raises(NoUsableKeyError, match="rowid"):
        src.describe("shadow")


@pytest.mark.parametrize("table", ["infinite", "midnight"])
def test_values_arrow_cannot_hold_are_data_errors(src: DuckdbSource, table: str) -> None:
    info = src.describe(table)
    with pytest.raises(DataError, match=r"infinity|24:00:00"):
        read_all(src, info, 10)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailableError, match="no such file"):
        open_source(f"duckdb:///{tmp_path / 'nope.duckdb'}")
    broken = tmp_path / "broken.duckdb"
    broken.write_bytes(b"not a database" * 1000)
    with pytest.raises(SourceUnavailableError, match="not a valid DuckDB"):
        open_source(f"duckdb:///{broken}")
    with pytest.raises(SourceError, match="expected duckdb:///"):
        DuckdbSource("duckdb://relative.duckdb")


def test_opened_read_only(src: DuckdbSource, db: Path) -> None:
    with pytest.raises(duckdb.Error):  # the reader's lock keeps writers out
        duckdb.connect(str(db)).close()
    with pytest.raises(duckdb.Error, match="read-only"):
        src._con.execute("CREATE TABLE x (i INTEGER)")


@pytest.mark.parametrize("table,count", [("items", 4), ("pairs", 3), ("loose", 3),
                                         ("moods", 3), ("nanos", 3)])
def test_split_ranges_are_disjoint_complete_and_in_key_order(src: DuckdbSource, table: str,
                                                             count: int) -> None:
    """``split``: quantile boundaries as text cast back to the key's type (timestamps with
    a zone, nanoseconds, enums, rowids, composite keys); the ranges read every row once."""
    from egress.engine.split import plan_ranges

    info = src.describe(table)
    ranges = plan_ranges(src, info, count, 10)
    assert ranges is not None and 2 <= len(ranges) <= count
    whole = read_all(src, info, 7)
    parts = [read_all(src, info, 7, Predicate((), r)) for r in ranges]
    assert [row for part in parts for row in part] == whole
    assert all(parts), [len(p) for p in parts]
    filtered = [read_all(src, info, 7, Predicate((Condition(info.columns[0].name, "not_null"),),
                                                 r)) for r in ranges]
    assert [row for part in filtered for row in part] == [
        r for r in whole if r[info.columns[0].name] is not None]


def test_split_on_timestamptz_and_text_keys(tmp_path: Path) -> None:
    from egress.engine.split import plan_ranges

    path = tmp_path / "keys.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE at_key (ts TIMESTAMPTZ PRIMARY KEY, n INTEGER);"
                "INSERT INTO at_key SELECT TIMESTAMPTZ '2024-01-01 00:00:00.123456+00' + "
                "(CASE WHEN g % 4 = 0 THEN g * INTERVAL '1 day' ELSE g * INTERVAL '1 second' "
                "END), g FROM range(0, 2000) r(g);"
                "CREATE TABLE words (w VARCHAR PRIMARY KEY);"
                "INSERT INTO words SELECT 'wörd ''' || g || chr(10) FROM range(0, 500) r(g);")
    con.close()
    source = DuckdbSource(f"duckdb:///{path}")
    try:
        for table in ("at_key", "words"):
            info = source.describe(table)
            ranges = plan_ranges(source, info, 4, 10)
            assert ranges is not None and len(ranges) == 4
            whole = read_all(source, info, 97)
            parts = [read_all(source, info, 97, Predicate((), r)) for r in ranges]
            assert [row for part in parts for row in part] == whole
            sizes = [len(p) for p in parts]
            assert max(sizes) - min(sizes) <= 2, sizes
    finally:
        source.close()
