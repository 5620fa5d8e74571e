"""MySqlSource against a real MariaDB server: catalog, keys, keyset pages, filters, errors."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

import egress
from egress.domain.keys import decode_key, encode_key
from egress.domain.predicate import Predicate
from egress.exceptions import (
    DataError,
    NoUsableKeyError,
    PermissionDeniedError,
    SourceAccessError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources import open_source
from egress.sources.base import LOGICAL_TYPE, SOURCE_TYPE, TableInfo
from egress.sources.mysql import MySqlSource
from mariadbserver import MariaDbServer
from pgserver import free_port

pytestmark = pytest.mark.mariadb


def database(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def run(server: MariaDbServer, url: str, *statements: str) -> None:
    server.execute(*statements, database=database(url))


def fetch(server: MariaDbServer, url: str, query: str) -> list[tuple[Any, ...]]:
    conn = server.connect(database(url))
    try:
        with conn.cursor() as cur:  # type: ignore[attr-defined]
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(query)
            return list(cur.fetchall())
    finally:
        conn.close()  # type: ignore[attr-defined]


@pytest.fixture
def source(mariadb_url: str) -> Iterator[MySqlSource]:
    src = MySqlSource(mariadb_url)
    yield src
    src.close()


def read_all(source: MySqlSource, info: TableInfo, page: int,
             predicate: Predicate | None = None) -> list[dict[str, Any]]:
    """Every row, page by page; the cursor goes through the checkpoint's JSON as in a
    real resume."""
    rows: list[dict[str, Any]] = []
    after = None
    while True:
        got = [r for b in source.read(info, after, page, predicate) for r in b.to_pylist()]
        rows += got
        if len(got) < page:
            return rows
        after = decode_key(encode_key(tuple(got[-1][k] for k in info.key_columns)))


def test_catalog_columns_types_and_key(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url,
        "CREATE TABLE orders (id bigint unsigned NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "amount decimal(10,2) NOT NULL, big decimal(50,4), f float, ok boolean, "
        "flags bit(3), at datetime(6), ts timestamp(3) NULL, doc json, e enum('a','b'), "
        "t time, y year, body mediumblob)",
        "CREATE TABLE `we``ird %s` (id int PRIMARY KEY)",
        "CREATE VIEW v AS SELECT id FROM orders",
        "INSERT INTO orders (amount) VALUES (1), (2), (3)")
    assert source.tables() == ["orders", "we`ird %s"]  # base tables, not views
    info = source.describe("orders")
    types = {f.name: f.type for f in info.schema}
    assert types == {
        "id": pa.uint64(), "amount": pa.decimal128(10, 2), "big": pa.string(),
        "f": pa.float32(), "ok": pa.bool_(), "flags": pa.uint64(),
        "at": pa.timestamp("us"), "ts": pa.timestamp("us", tz="UTC"), "doc": pa.string(),
        "e": pa.string(), "t": pa.string(), "y": pa.uint16(), "body": pa.binary(),
    }
    fields = {f.name: f for f in info.schema}
    assert fields["big"].metadata[LOGICAL_TYPE] == b"decimal"
    assert fields["doc"].metadata[LOGICAL_TYPE] == b"json"  # MariaDB: LONGTEXT + check
    assert fields["doc"].metadata[SOURCE_TYPE] == b"json"
    assert fields["e"].metadata[SOURCE_TYPE] == b"enum('a','b')"
    assert fields["ts"].metadata[SOURCE_TYPE] == b"timestamp(3)"
    assert not fields["amount"].nullable and fields["big"].nullable
    assert info.key_columns == info.primary_key == ("id",)
    assert info.row_estimate == 3
    weird = source.describe("we`ird %s")  # backquotes and % in a name: quoted, not broken
    assert read_all(source, weird, 5) == []


def test_session_is_read_only_utc_and_utf8mb4(source: MySqlSource) -> None:
    (row,) = source._fetch("SELECT @@session.tx_read_only, @@session.time_zone, "
                           "@@character_set_results, @@character_set_client")
    assert row == ("1", "+00:00", "utf8mb4", "utf8mb4")
    with pytest.raises(Exception, match="READ ONLY"):
        source._fetch("CREATE TABLE scratch (id int)")


def test_composite_key_pages_as_the_server_orders(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url,
        "CREATE TABLE pairs (a int, b varchar(20), c varbinary(8), v int, "
        "PRIMARY KEY (a, b, c)) COLLATE utf8mb4_general_ci",
        # a case-insensitive collation: 'x' sorts before 'Y' (in binary after)
        "INSERT INTO pairs SELECT CAST(seq AS SIGNED) DIV 50 - 3, "
        "CONCAT(IF(seq % 2, 'x', 'Y'), seq % 7), UNHEX(HEX(seq % 50)), seq FROM seq_1_to_400")
    info = source.describe("pairs")
    assert info.key_columns == ("a", "b", "c")
    expected = fetch(mariadb_server, mariadb_url, "SELECT a, b, c, v FROM pairs ORDER BY a, b, c")
    for page in (1, 7, 400, 1000):
        rows = read_all(source, info, page)
        assert [(r["a"], r["b"], r["c"], r["v"]) for r in rows] == expected


@pytest.mark.parametrize(("declared", "values"), [
    ("bigint unsigned", "0, 1, 9223372036854775808, 18446744073709551615"),
    ("decimal(65,30)", "'-1e20', '-0.000000000000000000000000000001', '0', '12345678901234567890."
     "5'"),
    ("decimal(12,3)", "-1.5, 0, 2.25, 999999999.999"),
    ("datetime(6)", "'1000-01-01 00:00:00', '2024-02-29 12:00:00.000001', '9999-12-31 23:59:59'"),
    ("timestamp(6)", "'1970-01-01 00:00:01', '2024-02-29 12:00:00.5', '2038-01-19 03:14:07'"),
    ("time(6)", "'-838:59:59', '-00:00:00.000001', '00:00:00', '23:59:59.5', '100:00:00'"),
    ("date", "'1000-01-01', '2024-02-29', '9999-12-31'"),
    ("varbinary(8)", "x'', x'00', x'0000', x'ff', x'7f00'"),
    ("float", "-3.4e38, -1.5, 1e-45, 0.1, 3.4e38"),
    ("year", "1901, 2000, 2155"),
    ("bit(12)", "0, 1, 4095"),
    ("char(3) COLLATE utf8mb4_unicode_ci", "'a', 'B', 'c', 'é', '😀', 'z z'"),
])
def test_keys_of_every_type_resume_as_the_server_orders(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource,
    declared: str, values: str,
) -> None:
    rows = ", ".join(f"({v}, {i})" for i, v in enumerate(values.split(", ")))
    run(mariadb_server, mariadb_url, f"CREATE TABLE k (k {declared} PRIMARY KEY, n int)",
        f"INSERT INTO k VALUES {rows}")
    info = source.describe("k")
    expected = [n for (n,) in fetch(mariadb_server, mariadb_url, "SELECT n FROM k ORDER BY k")]
    assert len(expected) == len(values.split(", "))
    for page in (1, 2):
        assert [r["n"] for r in read_all(source, info, page)] == expected


def test_filters_bind_their_values_and_page_like_unfiltered_reads(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url,
        "CREATE TABLE nums (id int PRIMARY KEY, label varchar(20), at datetime(6), "
        "ts timestamp(6) NULL)",
        "INSERT INTO nums SELECT seq, CONCAT('n', seq), "
        "TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq HOUR, "
        "TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq HOUR FROM seq_1_to_50")
    info = source.describe("nums")
    hostile = Predicate.from_json(
        [{"column": "label", "op": "!=", "value": "x'; DROP TABLE nums; -- %s \\"}])
    assert read_all(source, info, 7, hostile) == read_all(source, info, 7)
    assert len(read_all(source, info, 50)) == 50
    # an instant with an offset is compared in UTC (the session's zone)
    since = Predicate.from_json([
        {"column": "ts", "op": ">=", "value": "2024-01-02T03:00:00+01:00"},
        {"column": "at", "op": "<", "value": "2024-01-02T05:00:00Z"},
        {"column": "label", "op": "in", "value": ["n26", "n27", "n28", "n29", "n40"]},
    ])
    assert [r["id"] for r in read_all(source, info, 2, since)] == [26, 27, 28]


def test_unique_not_null_index_is_the_key_when_there_is_no_primary_key(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url,
        "CREATE TABLE nokey (a varchar(10) NOT NULL, b int NOT NULL, c int, "
        "t text NOT NULL, UNIQUE KEY u_c (c), UNIQUE KEY u_t (t(5)), UNIQUE KEY u_ba (b, a))",
        "INSERT INTO nokey SELECT CONCAT('x', seq % 4), seq DIV 4, seq, seq FROM seq_0_to_30")
    info = source.describe("nokey")
    assert info.primary_key == () and info.key_columns == ("b", "a")
    rows = read_all(source, info, 4)
    assert [(r["b"], r["a"]) for r in rows] == fetch(
        mariadb_server, mariadb_url, "SELECT b, a FROM nokey ORDER BY b, a")


def test_no_usable_key_says_why(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url,
        "CREATE TABLE loose (a int, b int, UNIQUE KEY u_a (a))",
        "CREATE TABLE by_enum (e enum('z', 'a') PRIMARY KEY)")
    with pytest.raises(NoUsableKeyError) as err:
        source.describe("loose")
    assert "'loose'" in str(err.value) and "u_a (a column may be NULL)" in str(err.value)
    assert "PRIMARY KEY" in str(err.value)
    with pytest.raises(NoUsableKeyError, match="ENUM sorts by its position"):
        source.describe("by_enum")


def test_unknown_tables_list_close_names(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url, "CREATE TABLE orders (id int PRIMARY KEY)",
        "CREATE VIEW recent AS SELECT id FROM orders")
    with pytest.raises(TableNotFoundError) as err:
        source.describe("ordres")
    assert "did you mean orders" in str(err.value)
    for name in ("orders`; DROP TABLE orders; --", "`orders`", "recent", "mysql.user"):
        with pytest.raises(TableNotFoundError):
            source.describe(name)
    assert source.tables() == ["orders"]


def zero_dates(server: MariaDbServer, url: str) -> None:
    conn = server.connect(database(url))
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SET SESSION sql_mode = ''")  # allows zero dates
        cur.execute("CREATE TABLE legacy (id int, k varchar(5), d date, "
                    "at datetime(6), PRIMARY KEY (id, k))")
        cur.execute("INSERT INTO legacy VALUES (1, 'a', '2024-01-01', '2024-01-01 10:00:00'), "
                    "(2, 'b', '2024-01-02', '0000-00-00 00:00:00'), "
                    "(3, 'c', '2024-00-10', '2024-01-03 10:00:00')")
    conn.close()  # type: ignore[attr-defined]


def test_zero_dates_are_a_data_error_naming_table_column_and_key(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource, tmp_path: Any
) -> None:
    zero_dates(mariadb_server, mariadb_url)
    info = source.describe("legacy")
    with pytest.raises(DataError) as err:
        read_all(source, info, 10)
    message = str(err.value)
    # the first row in key order whose value is refused
    assert "table 'legacy', column 'at' (datetime(6))" in message
    assert "id=2, k='b'" in message and "zero date '0000-00-00 00:00:00.000000'" in message
    assert "NULL" in message  # what to do about it
    with pytest.raises(DataError, match=r"column 'd' \(date\), row with key id=3, k='c'"):
        read_all(source, info, 10, Predicate.from_json(
            [{"column": "id", "op": "!=", "value": 2}]))
    # the way out the message names: a filter leaves those rows out
    good = Predicate.from_json([{"column": "at", "op": ">=", "value": "1000-01-01"},
                                {"column": "id", "op": "!=", "value": 3}])
    assert [r["id"] for r in read_all(source, info, 10, good)] == [1]
    with pytest.raises(DataError, match="zero date"):
        egress.export(mariadb_url, ["legacy"], to=tmp_path / "out", format="csv", fsync=False)


def test_a_tinyint_1_holding_another_number_is_a_data_error(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url, "CREATE TABLE flags (id int PRIMARY KEY, on_ boolean)",
        "INSERT INTO flags VALUES (1, 1), (2, 0), (3, NULL), (4, 2)")
    info = source.describe("flags")
    first = Predicate.from_json([{"column": "id", "op": "<=", "value": 3}])
    assert read_all(source, info, 2, first) == [
        {"id": 1, "on_": True}, {"id": 2, "on_": False}, {"id": 3, "on_": None}]
    with pytest.raises(DataError, match=r"key id=4: holds 2, but TINYINT\(1\)"):
        read_all(source, info, 10)


def test_wrong_password_is_refused_and_never_shown(
    mariadb_server: MariaDbServer, mariadb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = database(mariadb_url)
    mariadb_server.execute("CREATE USER IF NOT EXISTS 'reader'@'127.0.0.1' "
                           "IDENTIFIED BY 'right-s3cret'",
                           f"GRANT SELECT ON `{db}`.* TO 'reader'@'127.0.0.1'")
    run(mariadb_server, mariadb_url, "CREATE TABLE t (id int PRIMARY KEY)")
    src = MySqlSource(mariadb_server.url_for(db, "reader", "right-s3cret"))
    assert src.tables() == ["t"]
    src.close()
    with pytest.raises(SourceAccessError) as err:
        MySqlSource(mariadb_server.url_for(db, "reader", "wr0ng-s3cret"))
    assert "wr0ng-s3cret" not in str(err.value) and "reader:***@" in str(err.value)
    assert "rejected the user or password" in str(err.value) and not err.value.transient
    with pytest.raises(SourceAccessError, match="no such database"):
        MySqlSource(mariadb_server.url_for("no_such_db"))
    monkeypatch.setenv("MYSQL_PWD", "right-s3cret")  # without a password in the URL
    MySqlSource(mariadb_server.url_for(db, "reader")).close()


def test_nothing_listening_is_transient() -> None:
    with pytest.raises(SourceUnavailableError, match="connection refused") as err:
        MySqlSource(f"mysql://u:pa55word@127.0.0.1:{free_port()}/db")
    assert err.value.transient and "pa55word" not in str(err.value)


def test_a_revoked_grant_is_permission_denied(
    mariadb_server: MariaDbServer, mariadb_url: str
) -> None:
    db = database(mariadb_url)
    run(mariadb_server, mariadb_url, "CREATE TABLE t (id int PRIMARY KEY)",
        "CREATE TABLE hidden (id int PRIMARY KEY)")
    mariadb_server.execute("CREATE USER IF NOT EXISTS 'narrow'@'127.0.0.1'",
                           f"GRANT SELECT ON `{db}`.`t` TO 'narrow'@'127.0.0.1'")
    src = MySqlSource(mariadb_server.url_for(db, "narrow"))
    try:
        assert src.tables() == ["t"]  # a table without a grant is not listed
        with pytest.raises(TableNotFoundError):
            src.describe("hidden")
        info = src.describe("t")
        mariadb_server.execute(f"REVOKE SELECT ON `{db}`.`t` FROM 'narrow'@'127.0.0.1'")
        with pytest.raises(PermissionDeniedError, match="GRANT SELECT"):
            list(src.read(info, None, 10))
    finally:
        src.close()


def test_lost_connection_is_transient_then_reconnects(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url, "CREATE TABLE t (id int PRIMARY KEY)",
        "INSERT INTO t VALUES (1), (2)")
    info = source.describe("t")
    assert read_all(source, info, 10) == [{"id": 1}, {"id": 2}]
    ((conn_id,),) = source._fetch("SELECT CONNECTION_ID()")
    mariadb_server.execute(f"KILL {int(conn_id)}")
    with pytest.raises(SourceUnavailableError):
        list(source.read(info, None, 10))
    assert read_all(source, info, 10) == [{"id": 1}, {"id": 2}]


def test_a_reader_left_open_does_not_block_the_next(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url, "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT seq, REPEAT('v', 100) FROM seq_1_to_50000")
    info = source.describe("t")
    stale = source.read(info, None, 50000)
    assert next(stale).num_rows > 0  # a streamed result is open on the connection
    assert source.describe("t").row_estimate == 50000
    assert len(read_all(source, info, 20000)) == 50000
    stale.close()  # closing it late leaves the connection usable
    assert [r["id"] for r in read_all(source, info, 10, Predicate.from_json(
        [{"column": "id", "op": "<=", "value": 3}]))] == [1, 2, 3]


@pytest.mark.parametrize("scheme", ["mariadb", "mysql+pymysql"])
def test_url_schemes(
    mariadb_server: MariaDbServer, mariadb_url: str, scheme: str
) -> None:
    run(mariadb_server, mariadb_url, "CREATE TABLE t (id int PRIMARY KEY)")
    src = open_source(mariadb_url.replace("mysql", scheme, 1))
    try:
        assert isinstance(src, MySqlSource) and src.tables() == ["t"]
    finally:
        src.close()


def test_values_read_exactly(
    mariadb_server: MariaDbServer, mariadb_url: str, source: MySqlSource
) -> None:
    run(mariadb_server, mariadb_url,
        "CREATE TABLE v (id int PRIMARY KEY, d decimal(65,30), ts timestamp(6) NULL, "
        "f float, t text)",
        "INSERT INTO v VALUES (1, '-12345678901234567890123456789012345.123456789012345678901234567"
        "890', '2038-01-19 03:14:07.999999', 16777217, '😀 four bytes')")
    (row,) = read_all(source, source.describe("v"), 5)
    assert decimal.Decimal(row["d"]) == decimal.Decimal(
        "-12345678901234567890123456789012345.123456789012345678901234567890")
    assert row["ts"] == dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=dt.UTC)
    assert row["f"] == 16777216.0  # the float's own value (2^24 + 1 rounds in a FLOAT)
    assert row["t"] == "😀 four bytes"
