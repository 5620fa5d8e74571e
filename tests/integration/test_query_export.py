"""Query exports through the engine (``egress.export(query=…)``) on real SQLite and
PostgreSQL: typed like tables, read-only, paged by the key, resumable byte for byte."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

import egress
from egress.exceptions import ConfigError, DataError
from jobsharness import make_events_db

FORMATS = [("csv", "none"), ("jsonl", "gzip"), ("json", "zstd"), ("sql", "none"),
           ("parquet", "zstd")]


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in ("manifest.json", "_SUCCESS")}


def _pg_events(url: str, rows: int = 600) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, kind text, "
                     "amount numeric(12,2), tags int[], at timestamptz, doc jsonb)")
        conn.execute(
            "INSERT INTO events SELECT i, CASE WHEN i %% 3 = 0 THEN 'buy' ELSE 'view' END, "
            "CASE WHEN i %% 10 = 0 THEN NULL ELSE i / 7.0 END, ARRAY[i, i + 1], "
            "timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute', "
            "jsonb_build_object('n', i) FROM generate_series(1, %s) AS i", (rows,))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return make_events_db(tmp_path / "src.db", {"events": 700, "users": 30})


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def source_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return make_events_db(tmp_path / "src.db", {"events": 700, "users": 30})
    url: str = request.getfixturevalue("pg_url")
    _pg_events(url)
    return url


@pytest.mark.parametrize(("fmt", "compression"), FORMATS)
def test_select_star_is_byte_identical_to_the_table_export(
    source_url: str, tmp_path: Path, fmt: str, compression: str
):
    """Same declared types, same conversions: ``SELECT * FROM events`` named ``events``
    writes exactly the table export's bytes (and its parts)."""
    common: dict[str, Any] = dict(format=fmt, compression=compression, part_rows=128,
                                  fsync=False)
    egress.export(source_url, ["events"], to=tmp_path / "table", **common)
    result = egress.export(source_url, to=tmp_path / "query", query="SELECT * FROM events;",
                           key=["id"], name="events", **common)
    assert _files(tmp_path / "query") == _files(tmp_path / "table")
    assert result.manifest is not None and result.manifest["tables"][0]["rows"] == (
        700 if source_url.startswith("sqlite") else 600)


def test_query_rows_equal_the_query_result_sqlite(sqlite_url: str, tmp_path: Path):
    sql = ("SELECT e.id * 2 AS k, e.kind, u.id AS user, e.amount + 1 AS more "
           "FROM events e JOIN users u ON u.id = e.id % 30 WHERE e.kind <> 'buy'")
    egress.export(sqlite_url, to=tmp_path / "out", query=sql, key=["k"], name="joined",
                  format="csv", part_rows=50, fsync=False)
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        expected = [[_text(v) for v in r] for r in conn.execute(sql + " ORDER BY k")]
    rows = list(csv.reader(io.StringIO((tmp_path / "out" / "joined.csv").read_text())))
    assert rows[0] == ["k", "kind", "user", "more"]
    assert rows[1:] == expected and len(expected) > 300


@pytest.mark.parametrize(("sql", "key", "probe"), [
    ("SELECT kind, id, amount FROM events", ["kind", "id"], "id"),
    ("SELECT created_at, payload FROM events", ["created_at"], "payload"),
])
def test_text_and_datetime_keys_page_by_their_stored_values(
    sqlite_url: str, tmp_path: Path, sql: str, key: list[str], probe: str
):
    """Keys SQLite types by conversion (TEXT, DATETIME) page by the raw stored value."""
    result = egress.export(sqlite_url, to=tmp_path, query=sql, key=key, format="jsonl",
                           part_rows=9, fsync=False)
    assert result.manifest is not None and result.manifest["total_rows"] == 700
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        order = conn.execute(f"SELECT {probe} FROM ({sql}) ORDER BY {', '.join(key)}")
        expected = [r[0] for r in order]
    lines = (tmp_path / "query.jsonl").read_text().splitlines()
    assert [json.loads(line)[probe] for line in lines] == expected


def _text(v: object) -> str:
    return "" if v is None else repr(v) if isinstance(v, float) else str(v)


@pytest.mark.postgres
def test_query_rows_equal_the_query_result_postgres(pg_url: str, tmp_path: Path):
    _pg_events(pg_url)
    sql = ("SELECT kind, id, (amount * 2)::text AS twice FROM events "
           "WHERE id % 4 <> 0")
    egress.export(pg_url, to=tmp_path / "out", query=sql, key=["kind", "id"],
                  format="csv", part_rows=40, fsync=False)
    with psycopg.connect(pg_url) as conn:
        expected = [[_text(v) for v in r]
                    for r in conn.execute(sql + " ORDER BY kind, id").fetchall()]
    rows = list(csv.reader(io.StringIO((tmp_path / "out" / "query.csv").read_text())))
    assert rows[0] == ["kind", "id", "twice"] and rows[1:] == expected


def _run_interrupted(url: str, out: Path, every: int, **kwargs: Any) -> int:
    """Run until ``every`` stop checks have passed, then stop; resume until done.
    Returns the number of runs."""
    runs = 0
    while True:
        calls = 0

        def stop() -> bool:
            nonlocal calls
            calls += 1
            return calls > every

        result = egress.export(url, to=out, resume=runs > 0, should_stop=stop, fsync=False,
                               **kwargs)
        runs += 1
        if not result.interrupted:
            return runs


@pytest.mark.parametrize(("fmt", "compression"), [("csv", "gzip"), ("parquet", "none"),
                                                  ("json", "none")])
def test_an_interrupted_query_export_resumes_byte_identically(
    source_url: str, tmp_path: Path, fmt: str, compression: str
):
    kwargs: dict[str, Any] = dict(
        query="SELECT id, kind, amount FROM events WHERE id % 5 <> 0", key=["id"],
        name="q", format=fmt, compression=compression, part_rows=37, max_file_size=1200,
        slice_seconds=0.0001,
    )
    egress.export(source_url, to=tmp_path / "whole", fsync=False, **kwargs)
    runs = _run_interrupted(source_url, tmp_path / "pieces", 3, **kwargs)
    assert runs > 3
    whole, pieces = _files(tmp_path / "whole"), _files(tmp_path / "pieces")
    assert pieces == whole and len(whole) > 1
    assert not (tmp_path / "pieces" / ".egress").exists()


def test_resume_refuses_another_query(sqlite_url: str, tmp_path: Path):
    common: dict[str, Any] = dict(key=["id"], format="csv", part_rows=10, fsync=False)
    first = egress.export(sqlite_url, to=tmp_path, query="SELECT id FROM events",
                          should_stop=lambda: True, **common)
    assert first.interrupted
    with pytest.raises(ConfigError, match="query"):
        egress.export(sqlite_url, to=tmp_path, query="SELECT id FROM users", resume=True,
                      **common)


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize("sql", [
    "DELETE FROM events",
    "INSERT INTO events (id) VALUES (100000)",
    "DROP TABLE events",
    "ATTACH DATABASE ':memory:' AS other",
    "PRAGMA user_version = 7",
    "SELECT id FROM events; DELETE FROM events",
    "SELECT id FROM events) AS x; DELETE FROM events; SELECT * FROM (SELECT 1",
    "WITH gone AS (DELETE FROM events RETURNING id) SELECT id FROM gone",
    "SELECT id FROM events WHERE id > ?",
])
def test_sqlite_refuses_anything_but_one_read_only_query(sqlite_url: str, tmp_path: Path,
                                                         sql: str):
    path = sqlite_url.removeprefix("sqlite:///")
    before = _digest(path)
    with pytest.raises(ConfigError) as err:
        egress.export(sqlite_url, to=tmp_path, query=sql, key=["id"], format="csv")
    message = str(err.value)
    assert any(w in message for w in ("not allowed", "one statement", "parameters",
                                      "read-only")), message
    assert _digest(path) == before


@pytest.mark.postgres
@pytest.mark.parametrize(("sql", "why"), [
    ("DELETE FROM events", "not allowed"),
    ("SELECT id FROM events; DELETE FROM events", "syntax error"),
    ("SELECT id FROM events) AS x; DELETE FROM events; SELECT * FROM (SELECT 1",
     "multiple commands"),
    ("WITH gone AS (DELETE FROM events RETURNING id) SELECT id FROM gone", "top level"),
    ("SELECT nextval('seq') AS id", "read-only transaction"),
    ("SELECT id FROM events WHERE id > $1", "parameters"),
])
def test_postgres_refuses_anything_but_one_read_only_query(pg_url: str, tmp_path: Path,
                                                           sql: str, why: str):
    _pg_events(pg_url, rows=20)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE seq")
    with pytest.raises(ConfigError, match=why):
        egress.export(pg_url, to=tmp_path, query=sql, key=["id"], format="csv")
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*), max(id) FROM events").fetchone() == (20, 20)
        assert conn.execute("SELECT last_value, is_called FROM seq").fetchone() == (1, False)


def test_a_key_that_is_not_unique_or_null_fails_naming_it(source_url: str, tmp_path: Path):
    # duplicates inside a page, and across the boundary of two pages (part_rows=3)
    for sql, part_rows in (("SELECT id / 2 AS half, kind FROM events", 100),
                           ("SELECT id / 4 AS half, kind FROM events", 3)):
        with pytest.raises(DataError, match=r"key \(half\) is not unique"):
            egress.export(source_url, to=tmp_path / str(part_rows), query=sql, key=["half"],
                          format="csv", part_rows=part_rows, fsync=False)
    with pytest.raises(DataError, match="key column 'half' is NULL"):
        egress.export(source_url, to=tmp_path / "n", query=(
            "SELECT CASE WHEN id > 5 THEN id END AS half FROM events"), key=["half"],
            format="csv", fsync=False)


def test_key_and_name_are_checked(sqlite_url: str, tmp_path: Path):
    cases = [
        (dict(query="SELECT id FROM events"), "needs `key`"),
        (dict(query="SELECT id FROM events", key=["nope"]), "'nope' are not columns"),
        (dict(query="SELECT id, id FROM events", key=["id"]), "more than once"),
        (dict(query="SELECT id FROM events", key=["id"], name="../x"), "bad query export name"),
        (dict(query="SELECT id FROM events", key=["id"], tables=["events"]), "not both"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ConfigError, match=words):
            egress.export(sqlite_url, to=tmp_path, format="csv", **kwargs)


def test_sqlite_statement_timeout(sqlite_url: str, tmp_path: Path):
    endless = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
               "SELECT i FROM n")
    with pytest.raises(DataError, match=r"longer than 0.3 s \(export.query_timeout_seconds\)"):
        egress.export(sqlite_url, to=tmp_path, query=endless, key=["i"], format="csv",
                      part_rows=10**12, query_timeout=0.3, fsync=False)


@pytest.mark.postgres
def test_postgres_statement_timeout(pg_url: str, tmp_path: Path):
    _pg_events(pg_url, rows=5)
    with pytest.raises(DataError, match=r"longer than 1 s \(export.query_timeout_seconds\)"):
        egress.export(pg_url, to=tmp_path, query="SELECT id, pg_sleep(5) AS z FROM events",
                      key=["id"], format="csv", query_timeout=1, fsync=False)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_interrupted_query_export_to_s3_resumes_to_the_local_bytes(
    source_url: str, tmp_path: Path, s3: Any, fmt: str
):
    from s3server import TEST_MIN_PART

    kwargs: dict[str, Any] = dict(query="SELECT id, kind, amount FROM events", key=["id"],
                                  format=fmt, compression="gzip", part_rows=60,
                                  slice_seconds=0.0001)
    egress.export(source_url, to=tmp_path / "local", fsync=False, **kwargs)
    runs = _run_interrupted(source_url, s3.url("q"), 3, sink_options={
        "min_part_bytes": TEST_MIN_PART, "backoff": 0.01}, **kwargs)
    assert runs > 2
    objects = {k: v for k, v in s3.objects("q/").items()
               if k not in ("manifest.json", "_SUCCESS")}
    assert objects == _files(tmp_path / "local") and s3.uploads("q/") == []
