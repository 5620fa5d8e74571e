"""Column subsets and row filters read from real SQLite and PostgreSQL sources: the rows a
predicate selects are the rows Python's own comparison selects, values are bound (never
SQL), and typmods neither cut nor round a value before it is compared."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

import psycopg
import pytest

from egress.domain.checkpoint import TaskSpec
from egress.domain.predicate import Condition, Predicate
from egress.engine.selection import check_selection
from egress.exceptions import ConfigError
from egress.sources import open_source
from egress.sources.base import Source

ROWS = 300


def _ids(source: Source, table: str, filters: list[dict], after: tuple | None = None
         ) -> list[int]:
    info = source.describe(table)
    _, predicate = check_selection(info, None, filters)
    out: list[int] = []
    for batch in source.read(info, after, 10_000, predicate=predicate):
        out += batch.column("id").to_pylist()
    return out


@pytest.fixture(scope="module")
def sqlite_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sel") / "sel.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, amount DECIMAL(10,2), "
                 "flag BOOLEAN, at DATETIME, loose)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", [
        (i, f"n{i % 7}", None if i % 10 == 0 else i / 4, i % 3 == 0,
         (dt.datetime(2024, 1, 1) + dt.timedelta(hours=i)).isoformat(sep=" "),
         i if i % 2 else f"s{i}")
        for i in range(1, ROWS + 1)
    ])
    conn.commit()
    conn.close()
    return path


def test_sqlite_filters_match_python(sqlite_source: Path):
    source = open_source(f"sqlite:///{sqlite_source}")
    try:
        every = range(1, ROWS + 1)
        assert _ids(source, "t", [{"column": "name", "op": "=", "value": "n3"}]) == \
            [i for i in every if i % 7 == 3]
        assert _ids(source, "t", [{"column": "amount", "op": ">=", "value": 50},
                                  {"column": "flag", "op": "=", "value": True}]) == \
            [i for i in every if i % 10 and i / 4 >= 50 and i % 3 == 0]
        assert _ids(source, "t", [{"column": "amount", "op": "is_null"}]) == \
            [i for i in every if i % 10 == 0]
        assert _ids(source, "t", [{"column": "at", "op": "<", "value": "2024-01-02 00:00:00"}]) \
            == list(range(1, 24))
        assert _ids(source, "t", [{"column": "name", "op": "in", "value": ["n1", "n2"]},
                                  {"column": "id", "op": "!=", "value": 8}]) == \
            [i for i in every if i % 7 in (1, 2) and i != 8]
        # an untyped column compares each value as stored: 5 is not "s5"
        assert _ids(source, "t", [{"column": "loose", "op": "=", "value": 5}]) == [5]
        assert _ids(source, "t", [{"column": "loose", "op": "=", "value": "s6"}]) == [6]
        # keyset pages after a cursor keep the filter
        assert _ids(source, "t", [{"column": "name", "op": "=", "value": "n3"}], (200,)) == \
            [i for i in every if i % 7 == 3 and i > 200]
        # a value is a value, not SQL
        assert _ids(source, "t", [{"column": "name", "op": "=", "value": "x' OR '1'='1"}]) == []
    finally:
        source.close()


@pytest.mark.postgres
def test_postgres_filters_match_python_and_keep_exact_values(pg_url: str):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (id int PRIMARY KEY, code varchar(5), amount numeric(10,2), "
            "flag boolean, at timestamptz, u uuid, body jsonb)")
        conn.execute(
            "INSERT INTO t SELECT i, 'c' || (i %% 5), i / 4.0, i %% 3 = 0, "
            "timestamptz '2024-01-01 00:00+00' + i * interval '1 hour', "
            "md5(i::text)::uuid, '{}' FROM generate_series(1, %s) i", (ROWS,))
    source = open_source(pg_url)
    try:
        every = range(1, ROWS + 1)
        assert _ids(source, "t", [{"column": "code", "op": "=", "value": "c2"}]) == \
            [i for i in every if i % 5 == 2]
        # varchar(5) must not cut 'c2xxxxx' to 'c2xxx'; numeric(10,2) must not round 0.254
        assert _ids(source, "t", [{"column": "code", "op": "=", "value": "c2xxxxx"}]) == []
        assert _ids(source, "t", [{"column": "amount", "op": "=", "value": "0.254"}]) == []
        assert _ids(source, "t", [{"column": "amount", "op": "=", "value": 0.25}]) == [1]
        assert _ids(source, "t", [{"column": "flag", "op": "=", "value": False},
                                  {"column": "at", "op": ">=",
                                   "value": "2024-01-01T10:00:00+00:00"}]) == \
            [i for i in every if i % 3 and i >= 10]
        assert _ids(source, "t", [{"column": "id", "op": "in", "value": [3, 5, 400]}]) == [3, 5]
        assert _ids(source, "t", [{"column": "code", "op": "=", "value": "x' OR '1'='1"}]) == []
        assert _ids(source, "t", [{"column": "amount", "op": ">", "value": 70}], (290,)) == \
            list(range(291, ROWS + 1))
        with psycopg.connect(pg_url) as conn:
            uuid_of_7 = conn.execute("SELECT md5('7')::uuid::text").fetchone()[0]
        assert _ids(source, "t", [{"column": "u", "op": "=", "value": uuid_of_7}]) == [7]
        with pytest.raises(ConfigError, match="cannot be filtered"):
            _ids(source, "t", [{"column": "body", "op": "is_null"}])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE small (id smallint PRIMARY KEY, n int)")
        with pytest.raises(ConfigError, match="from -32,768 to 32,767"):
            _ids(source, "small", [{"column": "id", "op": "<", "value": 40_000}])
        with pytest.raises(ConfigError, match="from -2,147,483,648 to 2,147,483,647"):
            _ids(source, "small", [{"column": "n", "op": "=", "value": 2**31}])
        assert _ids(source, "small", [{"column": "id", "op": "<", "value": 32_767}]) == []
    finally:
        source.close()


def test_check_selection_messages(sqlite_source: Path):
    source = open_source(f"sqlite:///{sqlite_source}")
    try:
        info = source.describe("t")
    finally:
        source.close()
    cols, pred = check_selection(info, ["name", "id", "name"], [
        {"column": "amount", "op": "<", "value": "12.50"}])
    assert cols == ("name", "id")
    assert pred == Predicate((Condition("amount", "<", "12.50"),))
    bad = [
        ([{"column": "nope", "op": "=", "value": 1}], "columns: id, name"),
        ([{"column": "id", "op": "~", "value": 1}], "allowed: =, !=, <"),
        ([{"column": "id", "op": "=", "value": True}], "not an integer"),
        ([{"column": "amount", "op": "=", "value": float("nan")}], "not a number"),
        ([{"column": "flag", "op": "=", "value": 1}], "true or false"),
        ([{"column": "at", "op": ">", "value": "yesterday"}], "ISO timestamp"),
        ([{"column": "name", "op": "=", "value": "a\x00b"}], "NUL"),
        ([{"column": "name", "op": "is_null", "value": "x"}], "takes no value"),
        ([{"column": "name", "op": "in", "value": []}], "list of 1"),
        # beyond what the column (or the driver) holds: refused here, not retried later
        ([{"column": "id", "op": ">", "value": 2**63}],
         "value 9223372036854775808 is out of range; allowed: integers from "
         "-9,223,372,036,854,775,808 to 9,223,372,036,854,775,807"),
        ([{"column": "id", "op": "in", "value": [1, -(2**63) - 1]}], "out of range"),
        ([{"column": "loose", "op": "=", "value": 2**64}], "out of range"),
        ([{"column": "amount", "op": "<", "value": 10**30}], "as a string"),
    ]
    for filters, words in bad:
        with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
            check_selection(info, None, filters)
    with pytest.raises(ConfigError, match="not in table 't'"):
        check_selection(info, ["id", "ghost"])


def test_task_spec_keeps_columns_and_predicate_through_json():
    spec = TaskSpec(table="t", format="csv", compression="none", part_rows=10, base_name="t",
                    columns=("b", "a"),
                    predicate=Predicate((Condition("a", "in", (1, 2)),
                                         Condition("b", "is_null"))))
    again = TaskSpec.from_json(spec.to_json())
    assert again == spec
    old = spec.to_json()
    del old["predicate"]  # a spec stored before filters existed
    assert TaskSpec.from_json(old).predicate is None
