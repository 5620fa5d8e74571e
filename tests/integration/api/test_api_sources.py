"""``/v1/sources``, their tables, the dry-run estimate and the synchronous row stream."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from dataclasses import replace

import httpx

from apiharness import Api, LiveServer, Tokens, assert_problem
from egress.api.app import create_app
from egress.store.sql import SqlJobStore


def test_sources_are_names_and_kinds_never_urls(api: Api, source_db):
    r = api.get("/v1/sources")
    assert r.status_code == 200
    assert r.json() == [{"name": "main", "kind": "sqlite"}]
    assert str(source_db) not in r.text


def test_tables_with_columns_types_keys_and_estimates(api: Api):
    tables = {t["name"]: t for t in api.get("/v1/sources/main/tables").json()}
    assert set(tables) == {"events", "users"}
    events = tables["events"]
    assert events["row_estimate"] == 2500 and events["key_columns"] == ["id"]
    assert events["exportable"] is True
    columns = {c["name"]: c for c in events["columns"]}
    assert columns["amount"] == {"name": "amount", "type": "decimal128(12, 2)",
                                 "source_type": "DECIMAL(12,2)", "nullable": True}
    assert columns["id"]["nullable"] is False
    assert_problem(api.get("/v1/sources/other/tables"), 422, "configured sources: main")


def test_a_table_egress_cannot_read_is_listed_with_the_reason(settings, store, tokens,
                                                              source_db, tmp_path):
    db = tmp_path / "nokey.db"
    db.write_bytes(source_db.read_bytes())
    conn = sqlite3.connect(db)
    conn.execute('CREATE TABLE odd ("rowid" INT, "_rowid_" INT, "oid" INT)')
    conn.commit()
    conn.close()
    s = replace(settings, sources={"main": f"sqlite:///{db}"})
    with LiveServer(create_app(s, store)) as server, \
            httpx.Client(base_url=server.url) as client:
        listed = Api(client, tokens["alpha"]).get("/v1/sources/main/tables").json()
    tables = {t["name"]: t for t in listed}
    assert tables["odd"]["exportable"] is False and "primary key" in tables["odd"]["reason"]
    assert tables["events"]["exportable"] is True


def test_estimate_creates_nothing(api: Api, store: SqlJobStore):
    r = api.post("/v1/exports:estimate", json={"source": "main", "tables": ["events", "users"],
                                               "format": "csv", "compression": "gzip"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [t["table"] for t in body["tables"]] == ["events", "users"]
    assert body["rows"] == 2540 and body["tables"][0]["rows"] == 2500
    assert 0 < body["tables"][0]["bytes"] < 2500 * 200
    # nothing completed yet: the documented default rate
    assert (body["rate_basis"], body["rows_per_second"]) == ("default", 200_000)
    assert body["seconds"] == round(2540 / 200_000, 1)
    plain = api.post("/v1/exports:estimate", json={"source": "main", "tables": ["events"]})
    assert plain.json()["bytes"] > body["tables"][0]["bytes"]  # gzip is smaller
    every = api.post("/v1/exports:estimate", json={"source": "main", "all": True}).json()
    assert every["rows"] == 2540
    assert_problem(api.post("/v1/exports:estimate", json={"source": "main",
                                                          "tables": ["nope"]}), 422, "nope")
    assert api.get("/v1/exports").json()["items"] == [] and store.audit_list("alpha") == []


def test_rows_stream_csv_and_jsonl(api: Api, store: SqlJobStore):
    r = api.get("/v1/sources/main/tables/events/rows",
                params=[("format", "csv"), ("columns", "id"), ("columns", "kind")])
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == 'attachment; filename="events.csv"'
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["id", "kind"] and len(rows) == 2501
    assert [int(row[0]) for row in rows[1:]] == list(range(1, 2501))
    lines = api.get("/v1/sources/main/tables/users/rows", params={"format": "jsonl"})
    assert lines.headers["content-type"] == "application/x-ndjson"
    records = [json.loads(line) for line in lines.text.splitlines()]
    assert len(records) == 40 and records[0]["id"] == 1 and "payload" in records[0]
    [entry, _] = store.audit_list("alpha")
    assert entry.action == "rows.download" and entry.details["table"] == "users"


def test_rows_refuse_large_tables_with_a_pointer_to_exports(make_api, tokens: Tokens):
    api = make_api(sync_max_rows=1000)
    r = api.get("/v1/sources/main/tables/events/rows")
    assert_problem(r, 422, "about 2,500 rows", "POST /v1/exports", "api.sync_max_rows")
    assert api.get("/v1/sources/main/tables/users/rows").status_code == 200
    assert_problem(api.get("/v1/sources/main/tables/users/rows",
                           token=tokens["exports:read"]), 403, "exports:create")
    assert_problem(api.get("/v1/sources/main/tables/users/rows", params={"format": "xml"}),
                   422)


def test_estimate_learns_the_rate_from_completed_exports(api_worker: Api, store: SqlJobStore):
    """Once exports complete, the estimate divides by their measured rows per second —
    for the same source kind and format only."""
    done = api_worker.create({"source": "main", "tables": ["events", "users"],
                              "format": "csv"})
    api_worker.wait(done["id"])
    record = store.export_get(None, done["id"])
    assert record is not None and record.started_at and record.finished_at
    rate = 2540 / (record.finished_at - record.started_at)

    body = {"source": "main", "tables": ["events"], "format": "csv"}
    measured = api_worker.post("/v1/exports:estimate", json=body).json()
    assert measured["rate_basis"] == "measured"
    assert abs(measured["rows_per_second"] - rate) <= 0.1 + rate * 1e-6
    # seconds come from the unrounded rate, rows_per_second is shown to 0.1
    assert abs(measured["seconds"] - 2500 / measured["rows_per_second"]) <= 0.051
    other_format = api_worker.post("/v1/exports:estimate",
                                   json={**body, "format": "jsonl"}).json()
    assert other_format["rate_basis"] == "default"
