"""``POST /v1/exports`` with a free-form ``query``: the scope, the checks (read-only, one
statement, key, name), a run by the embedded worker on SQLite and PostgreSQL sources,
the estimate, the audit entry (hash and length, never the text), a key that is not
unique and the statement timeout."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from apiharness import Api, LiveServer, Tokens, assert_problem
from egress.api.app import create_app
from egress.config import Settings
from egress.store.sql import SqlJobStore

JOINED = ("SELECT e.id * 2 AS k, e.kind, u.id AS user_id FROM events e "
          "JOIN users u ON u.id = e.user_id % 40 + 1 WHERE e.kind <> 'buy'")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _csv(api: Api, view: dict[str, Any], name: str) -> list[list[str]]:
    [f] = [f for f in view["files"] if f["name"] == name]
    r = api.get(f["download_url"])
    assert r.status_code == 200, r.text
    return list(csv.reader(io.StringIO(r.text)))


def test_query_export_writes_the_query_result_and_audits_a_hash(
    api_worker: Api, store: SqlJobStore, source_db: Path
):
    body = {"source": "main", "query": JOINED + ";", "key": ["k"], "name": "joined",
            "format": "csv"}
    export_id = api_worker.create(body)["id"]
    view = api_worker.wait(export_id)
    assert [t["table"] for t in view["tables"]] == ["joined"]
    with sqlite3.connect(source_db) as conn:
        expected = [[str(v) for v in r] for r in conn.execute(JOINED + " ORDER BY k")]
    assert len(expected) > 1000
    assert _csv(api_worker, view, "joined.csv") == [["k", "kind", "user_id"], *expected]
    assert view["rows"] == len(expected)
    [entry] = [e for e in store.audit_list("alpha", export_id=export_id)
               if e.action == "export.create"]
    assert entry.details["tables"] == ["joined"]
    assert entry.details["query_sha256"] == hashlib.sha256(JOINED.encode()).hexdigest()
    assert entry.details["query_length"] == len(JOINED)
    assert "SELECT" not in json.dumps(entry.details)


def test_query_needs_the_query_scope(api: Api, tokens: Tokens):
    body = {"source": "main", "query": "SELECT id FROM events", "key": ["id"]}
    assert_problem(api.post("/v1/exports", json=body, token=tokens["exports:create"]), 403,
                   "exports:query")
    assert_problem(api.post("/v1/exports:estimate", json=body, token=tokens["exports:read"]),
                   403, "exports:query")
    assert api.post("/v1/exports", json=body, token=tokens["exports:query"]).status_code == 403
    assert api.get("/v1/exports").json()["items"] == []


BAD_REQUESTS: list[tuple[dict[str, Any], list[str]]] = [
    ({"query": "SELECT id FROM events"}, ["needs `key`", "unique and NOT NULL"]),
    ({"query": "SELECT id FROM events", "key": ["nope"]}, ["'nope'", "result columns: id"]),
    ({"query": "SELECT id, id FROM events", "key": ["id"]}, ["more than once"]),
    ({"query": "SELECT id FROM events", "key": ["id"], "tables": ["events"]},
     ["`query` or `tables`"]),
    ({"query": "SELECT id FROM events", "key": ["id"],
      "tables": [{"name": "events", "columns": ["id"]}]}, ["columns and filters"]),
    ({"query": "SELECT id FROM events", "key": ["id"], "all": True}, ["not both"]),
    ({"tables": ["events"], "key": ["id"]}, ["`key` and `name` go with `query`"]),
    ({"query": "SELECT id FROM nowhere", "key": ["id"]}, ["no such table: nowhere"]),
    ({"query": "DELETE FROM events", "key": ["id"]}, ["DELETE statements are not allowed"]),
    ({"query": "DROP TABLE events", "key": ["id"]}, ["DROP statements are not allowed"]),
    ({"query": "ATTACH DATABASE 'x.db' AS x", "key": ["id"]}, ["ATTACH"]),
    ({"query": "SELECT id FROM events; DELETE FROM events", "key": ["id"]},
     ["one statement"]),
    ({"query": "WITH d AS (DELETE FROM events RETURNING id) SELECT id FROM d",
      "key": ["id"]}, ["SQLite refused the query"]),
    ({"query": "SELECT id FROM events WHERE id > :x", "key": ["id"]}, ["parameters"]),
]


def test_bad_query_requests_are_problems_and_change_nothing(api: Api, source_db: Path):
    before = _digest(source_db)
    for body, words in BAD_REQUESTS:
        for path in ("/v1/exports", "/v1/exports:estimate"):
            r = api.post(path, json={"source": "main", **body})
            problem = assert_problem(r, 422, *words)
            assert problem["type"].endswith("invalid-request"), (path, body, problem)
    assert _digest(source_db) == before
    assert api.get("/v1/exports").json()["items"] == []


def test_bad_names_are_refused_by_the_schema(api: Api):
    for name in ("../etc", "", ".hidden", "a/b"):
        r = api.post("/v1/exports", json={"source": "main", "query": "SELECT id FROM events",
                                          "key": ["id"], "name": name})
        assert_problem(r, 422)


def test_a_key_that_is_not_unique_fails_the_export(api_worker: Api):
    body = {"source": "main", "query": "SELECT user_id, kind FROM events",
            "key": ["user_id"], "format": "jsonl"}
    export_id = api_worker.create(body)["id"]
    view = api_worker.wait(export_id, "failed")
    assert "the key (user_id) is not unique" in view["error"], view
    assert "is not unique" in view["tables"][0]["error"]


def test_estimate_of_a_sqlite_query_has_no_row_count(api: Api):
    r = api.post("/v1/exports:estimate", json={"source": "main", "query": JOINED,
                                               "key": ["k"], "name": "joined"})
    assert r.status_code == 200, r.text
    assert r.json() == {"tables": [{"table": "joined", "rows": None, "bytes": None}],
                        "rows": None, "bytes": None, "seconds": None,
                        "rows_per_second": 200_000, "rate_basis": "default"}


# --- a PostgreSQL source --------------------------------------------------------------


@pytest.fixture
def pg_source(pg_url: str) -> str:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric(10,2), "
                     "status text, placed timestamptz)")
        conn.execute("INSERT INTO orders SELECT i, i * 1.25, "
                     "CASE WHEN i %% 3 = 0 THEN 'paid' ELSE 'open' END, "
                     "timestamptz '2024-05-01 00:00:00+00' + i * interval '1 hour' "
                     "FROM generate_series(1, %s) AS i", (900,))
        conn.execute("ANALYZE orders")
        conn.execute("CREATE SEQUENCE seq")
    return pg_url


@pytest.fixture
def pg_api(settings: Settings, store: SqlJobStore, tokens: Tokens, pg_source: str
           ) -> Iterator[Api]:
    """The API with a worker, a PostgreSQL source ``pg`` and a 1 s query timeout."""
    s = replace(settings, sources={**settings.sources, "pg": pg_source},
                export=replace(settings.export, query_timeout_seconds=1.0))
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(LiveServer(create_app(s, store, run_worker=True)))
        client = stack.enter_context(httpx.Client(base_url=server.url, timeout=30))
        yield Api(client, tokens["alpha"])


@pytest.mark.postgres
def test_query_export_on_postgres(pg_api: Api, pg_source: str):
    sql = "SELECT status, id, total, placed FROM orders WHERE id % 4 <> 0"
    body = {"source": "pg", "query": sql, "key": ["status", "id"], "name": "orders_by_status",
            "format": "csv"}
    estimate = pg_api.post("/v1/exports:estimate", json=body)
    assert estimate.status_code == 200, estimate.text
    rows_guess = estimate.json()["tables"][0]["rows"]
    assert isinstance(rows_guess, int) and 100 < rows_guess <= 900
    view = pg_api.wait(pg_api.create(body)["id"])
    with psycopg.connect(pg_source) as conn:
        expected = conn.execute(sql + " ORDER BY status, id").fetchall()
    rows = _csv(pg_api, view, "orders_by_status.csv")
    assert rows[0] == ["status", "id", "total", "placed"]
    assert [(r[0], int(r[1]), r[2]) for r in rows[1:]] == [
        (s, i, str(t)) for s, i, t, _ in expected]
    assert rows[1][3].startswith("2024-05-01") and "01:00:00" in rows[1][3]


@pytest.mark.postgres
def test_postgres_query_refusals_and_timeout(pg_api: Api, pg_source: str):
    for sql, words in (
        ("UPDATE orders SET total = 0", "UPDATE statements are not allowed"),
        ("SELECT id FROM orders; DELETE FROM orders", "syntax error"),
        ("WITH d AS (DELETE FROM orders RETURNING id) SELECT id FROM d", "top level"),
        ("SELECT id FROM orders WHERE id > $1", "parameters"),
    ):
        r = pg_api.post("/v1/exports", json={"source": "pg", "query": sql, "key": ["id"]})
        assert_problem(r, 422, words)
    # a write hidden in a function call fails in the READ ONLY transaction
    body = {"source": "pg", "query": "SELECT id, nextval('seq') AS n FROM orders",
            "key": ["id"]}
    view = pg_api.wait(pg_api.create(body)["id"], "failed")
    assert "cannot execute nextval() in a read-only transaction" in view["error"], view
    with psycopg.connect(pg_source) as conn:
        assert conn.execute("SELECT last_value, is_called FROM seq").fetchone() == (1, False)
    slow = {"source": "pg", "query": "SELECT id, pg_sleep(3) AS z FROM orders", "key": ["id"]}
    view = pg_api.wait(pg_api.create(slow)["id"], "failed", timeout=30)
    assert "longer than 1 s (export.query_timeout_seconds)" in view["error"], view
