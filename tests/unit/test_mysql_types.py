"""The MySQL source's pieces that need no server: type mapping, conversion of the
server's text, URLs, the keyset condition, the MySQL dialect of the SQL dump."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

from egress.exceptions import SourceError
from egress.formats import sql_mysql
from egress.formats.sql import SqlDumpFormat
from egress.sources import SOURCE_KINDS, source_kind
from egress.sources.base import SOURCE_TYPE
from egress.sources.mysql import _after, parse_url, quote_ident
from egress.sources.mysql_types import BadValue, convert, map_type


@pytest.mark.parametrize(("data_type", "column_type", "p", "s", "arrow"), [
    ("tinyint", "tinyint(4)", 3, 0, pa.int8()),
    ("tinyint", "tinyint(1)", 3, 0, pa.bool_()),
    ("tinyint", "tinyint(1) unsigned", 3, 0, pa.uint8()),
    ("mediumint", "mediumint(8) unsigned", 7, 0, pa.uint32()),
    ("bigint", "bigint(20) unsigned", 20, 0, pa.uint64()),
    ("decimal", "decimal(38,10)", 38, 10, pa.decimal128(38, 10)),
    ("decimal", "decimal(39,10)", 39, 10, pa.string()),
    ("float", "float", 12, None, pa.float32()),
    ("bit", "bit(1)", 1, None, pa.bool_()),
    ("bit", "bit(64)", 64, None, pa.uint64()),
    ("timestamp", "timestamp(6)", None, None, pa.timestamp("us", tz="UTC")),
    ("time", "time(3)", None, None, pa.string()),
    ("year", "year(4)", None, None, pa.uint16()),
    ("set", "set('a','b')", None, None, pa.string()),
    ("longblob", "longblob", None, None, pa.binary()),
    ("point", "point", None, None, pa.binary()),
    ("inet6", "inet6", None, None, pa.string()),
])
def test_type_mapping(data_type: str, column_type: str, p: int | None, s: int | None,
                      arrow: pa.DataType) -> None:
    assert map_type(data_type, column_type, p, s).arrow_type == arrow


def test_mariadb_json_and_keys_that_cannot_order() -> None:
    assert map_type("longtext", "longtext", None, None, is_json=True).logical_type == "json"
    assert map_type("enum", "enum('b','a')", None, None).not_a_key
    assert map_type("int", "int(11)", 10, 0).not_a_key is None


def test_values_convert_exactly() -> None:
    m = map_type("decimal", "decimal(5,3)", 5, 3)
    assert convert(["-12.500", None], m).to_pylist() == [decimal.Decimal("-12.500"), None]
    m = map_type("bit", "bit(10)", 10, None)
    assert convert([b"\x03\xff", None], m).to_pylist() == [1023, None]
    m = map_type("float", "float", 12, None)
    assert convert(["3.4028234663852886e38"], m).to_pylist() == [3.4028234663852886e38]
    m = map_type("timestamp", "timestamp(6)", None, None)
    assert str(convert(["2038-01-19 03:14:07.999999"], m)[0]) == \
        "2038-01-19 03:14:07.999999+00:00"
    m = map_type("json", "json", None, None)
    assert convert(['{"a":\r\n 1}'], m).to_pylist() == ['{"a":   1}']


@pytest.mark.parametrize("value", ["0000-00-00", "2024-00-10", "2024-02-00"])
def test_zero_dates_are_named(value: str) -> None:
    with pytest.raises(BadValue, match=f"zero date '{value}'") as err:
        convert(["2024-01-01", None, value], map_type("date", "date", None, None))
    assert err.value.index == 2


def test_a_boolean_holding_another_number() -> None:
    with pytest.raises(BadValue, match="holds 2") as err:
        convert(["1", "0", None, "2"], map_type("tinyint", "tinyint(1)", 3, 0))
    assert err.value.index == 3


def test_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MYSQL_PWD", raising=False)
    p = parse_url("mysql://app:p%40ss%2Fw@db.internal:3307/shop")
    assert (p.user, p.password, p.host, p.port, p.database) == (
        "app", "p@ss/w", "db.internal", 3307, "shop")
    assert parse_url("mariadb://app@db/shop").port == 3306
    assert parse_url("mariadb://app@db/shop").password is None
    monkeypatch.setenv("MYSQL_PWD", "from-env")
    assert parse_url("mysql+pymysql://app@db/shop").password == "from-env"
    sock = parse_url("mysql://app@localhost/shop?unix_socket=/run/mysqld/mysqld.sock")
    assert sock.unix_socket == "/run/mysqld/mysqld.sock"
    with pytest.raises(SourceError, match="names no database") as err:
        parse_url("mysql://app:secret@db:3306/")
    assert "secret" not in str(err.value)
    with pytest.raises(SourceError, match="not a MySQL URL"):
        parse_url("postgresql://app@db/shop")
    assert source_kind("mysql+pymysql://x/y") == "mysql"
    assert SOURCE_KINDS["mariadb"] is SOURCE_KINDS["mysql"]


def test_the_keyset_condition_uses_an_index_range() -> None:
    keys = ["t.`a`", "t.`b`", "t.`c`"]
    sql, params = _after(keys, ("%s", "%s", "CAST(%s AS TIME(6))"), [1, "x", "10:00:00"])
    assert sql == ("t.`a` >= %s AND (t.`a` > %s OR (t.`a` = %s AND (t.`b` > %s OR "
                   "(t.`b` = %s AND (t.`c` > CAST(%s AS TIME(6)))))))")
    assert params == [1, 1, 1, "x", "x", "10:00:00"]
    assert _after(["t.`id`"], ("%s",), [5]) == ("t.`id` > %s", [5])
    assert quote_ident("a`b%c") == "`a``b%%c`"


def test_the_mysql_dump_dialect() -> None:
    schema = pa.schema([
        pa.field("id", pa.int64(), nullable=False, metadata={SOURCE_TYPE: b"bigint(20)"}),
        pa.field("t`x", pa.string(), metadata={SOURCE_TYPE: b"text"}),
        pa.field("f", pa.float32(), metadata={SOURCE_TYPE: b"float"}),
        pa.field("ts", pa.timestamp("us", tz="UTC"), metadata={SOURCE_TYPE: b"timestamp(6)"}),
        pa.field("b", pa.binary(), metadata={SOURCE_TYPE: b"blob"}),
        pa.field("ok", pa.bool_(), metadata={SOURCE_TYPE: b"tinyint(1)"}),
    ])
    fmt = SqlDumpFormat(table="ev", dialect="mysql", primary_key=["id"])
    head = fmt.header(schema).decode()
    assert head.startswith("-- egress SQL dump of table ev (mysql)\n" + sql_mysql.SESSION)
    assert "CREATE TABLE IF NOT EXISTS `ev` (\n  `id` bigint(20) NOT NULL,\n  `t``x` text," \
        in head and head.endswith("  PRIMARY KEY (`id`)\n) DEFAULT CHARSET=utf8mb4;\n")
    enc = fmt.part_encoder(schema, 0)
    enc.add(pa.record_batch([
        pa.array([1, 2, 3]), pa.array(["it's \\", "cr\r\nlf", None]),
        pa.array([3.4028235e38, None, -0.0], pa.float32()),
        pa.array([0, None, 1_000_000], pa.timestamp("us", tz="UTC")),
        pa.array([b"\x00\xff", b"", None]), pa.array([True, False, None]),
    ], schema=schema))
    body = enc.finish().decode()
    assert "(1,'it''s \\',3.4028234663852886e+38,'1970-01-01 00:00:00.000000',X'00ff',1)" \
        in body
    assert "(2,_utf8mb4 X'63720d0a6c66',NULL,NULL,X'',0)" in body
    assert "(3,NULL,-0,'1970-01-01 00:00:01.000000',NULL,NULL);" in body


def test_connect_errors_say_what_happened() -> None:
    from egress.exceptions import SourceAccessError, SourceUnavailableError
    from egress.sources.mysql_errors import connect_error

    where = "mysql://u:***@h/db"
    unknown = connect_error(where, 2003, "Can't connect to MySQL server on 'h' "
                                         "([Errno -2] Name or service not known)")
    assert isinstance(unknown, SourceUnavailableError) and "unknown host name" in str(unknown)
    refused = connect_error(where, 1045, "Access denied for user 'u'@'10.0.0.1'")
    assert isinstance(refused, SourceAccessError) and "MYSQL_PWD" in str(refused)
