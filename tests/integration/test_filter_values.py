"""Filter values checked against the column's type when the export is created (issue #9
items 8 and 9): an integer beyond the column's range, a float beyond the float's range
and a lone surrogate are the caller's errors (ConfigError: 422, CLI exit 2), never a
transient failure of the worker. The largest values that fit are accepted and compare."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from test_selection import _ids

from apiharness import make_settings
from egress.engine.selection import check_selection
from egress.exceptions import ConfigError
from egress.manager import ExportRequest, create_export
from egress.sources import open_source
from egress.sources.base import Source
from egress.store.sql import SqlJobStore


def _refused(source: Source, table: str, column: str, value: object, *words: str) -> None:
    info = source.describe(table)
    for filters in ([{"column": column, "op": ">", "value": value}],
                    [{"column": column, "op": "in", "value": [value]}]):
        with pytest.raises(ConfigError) as caught:
            check_selection(info, None, filters)
        message = str(caught.value)
        assert repr(column) in message, message
        for word in words:
            assert word in message, message


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("values") / "v.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, big BIGINT, price DECIMAL(30,2), "
                 "ratio REAL, name TEXT, loose)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", [
        (1, 2**63 - 1, "12345678901234567890.5", 1.5, "a", 1),
        (2, -(2**63), "-1", -2.5, "b", "x"),
        (3, 0, "5", 1e300, "c", 2**62),
    ])
    conn.commit()
    conn.close()
    return path


def test_sqlite_values_beyond_the_column_are_refused(sqlite_db: Path):
    source = open_source(f"sqlite:///{sqlite_db}")
    try:
        limits = "from -9223372036854775808 to 9223372036854775807"
        _refused(source, "t", "id", 2**63, str(2**63), "out of range", limits)
        _refused(source, "t", "big", -(2**63) - 1, "out of range", limits)
        _refused(source, "t", "loose", 10**20, "out of range", "64-bit")
        _refused(source, "t", "ratio", 10**400, "out of range", "1.7976931e+308")
        _refused(source, "t", "ratio", "-1e309", "out of range")
        _refused(source, "t", "name", "caf\udce9", "valid Unicode", "surrogate")
        # what fits is accepted and compares as a number
        assert _ids(source, "t", [{"column": "big", "op": "=", "value": 2**63 - 1}]) == [1]
        assert _ids(source, "t", [{"column": "big", "op": "<=", "value": -(2**63)}]) == [2]
        assert _ids(source, "t", [{"column": "ratio", "op": ">", "value": 10**299}]) == [3]
        # a decimal column compares any number: beyond 64 bits it is bound exactly
        assert _ids(source, "t", [{"column": "price", "op": ">", "value": 10**19}]) == [1]
        assert _ids(source, "t", [{"column": "price", "op": "<", "value": -(10**30)}]) == []
    finally:
        source.close()


def test_manager_refuses_before_anything_is_stored(tmp_path: Path, sqlite_db: Path):
    """The library path (the CLI's jobs and the API share it): nothing is queued."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlJobStore(url)
    store.migrate()
    try:
        settings = make_settings(tmp_path / "home", url, sqlite_db)
        for value in (2**64, "caf\udce9"):
            column = "id" if isinstance(value, int) else "name"
            request = ExportRequest(source="main", tables=("t",), options={"select": {
                "t": {"filters": [{"column": column, "op": "=", "value": value}]}}})
            with pytest.raises(ConfigError, match=repr(column)):
                create_export(store, settings, request)
        assert store.export_list("default", limit=10) == []
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_values_beyond_the_column_are_refused(pg_url: str):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, s smallint, i integer, "
                     "f real, d double precision, n numeric(40,2))")
        conn.execute("INSERT INTO t VALUES (1, 32767, 2147483647, 3.0e38, 1e308, "
                     "1234567890123456789012345.5), (2, -32768, -2147483648, -1, -1, -1)")
    source = open_source(pg_url)
    try:
        _refused(source, "t", "s", 32768, "out of range", "from -32768 to 32767")
        _refused(source, "t", "i", -(2**31) - 1, "from -2147483648 to 2147483647")
        _refused(source, "t", "id", 2**63, "from -9223372036854775808 to 9223372036854775807")
        _refused(source, "t", "f", 10**39, "out of range", "3.4028235e+38")
        _refused(source, "t", "f", "3.5e38", "out of range")
        _refused(source, "t", "d", 10**309, "out of range")
        assert _ids(source, "t", [{"column": "s", "op": "=", "value": 32767}]) == [1]
        assert _ids(source, "t", [{"column": "i", "op": "<=", "value": -(2**31)}]) == [2]
        assert _ids(source, "t", [{"column": "f", "op": ">", "value": 10**38}]) == [1]
        assert _ids(source, "t", [{"column": "n", "op": ">", "value": 10**24}]) == [1]
    finally:
        source.close()
