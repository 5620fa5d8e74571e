"""``/v1/exports``: create, idempotency, validation problems, list, show, cancel, retry,
delete, and a full export run by the embedded worker (both stores)."""

from __future__ import annotations

import csv
import io
import json

from apiharness import Api, Tokens, assert_problem
from egress.store.sql import SqlJobStore


def test_create_answers_202_with_urls_and_audits(api: Api, store: SqlJobStore, tokens: Tokens):
    r = api.post("/v1/exports", json={"source": "main", "tables": ["events", "users"],
                                      "format": "jsonl", "compression": "gzip"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "queued" and body["id"].startswith("exp_")
    assert body["status_url"] == f"/v1/exports/{body['id']}"
    assert body["events_url"] == f"/v1/exports/{body['id']}/events"
    assert body["tables"] == [{"name": "events", "estimated_rows": 2500, "key_range": None},
                              {"name": "users", "estimated_rows": 40, "key_range": None}]
    view = api.get(body["status_url"]).json()
    assert [t["table"] for t in view["tables"]] == ["events", "users"]
    assert view["tables"][0]["rows_estimate"] == 2500 and view["rows_estimate"] == 2540
    assert view["project"] == "alpha" and view["format"] == "jsonl"
    [entry] = store.audit_list("alpha")
    assert entry.action == "export.create" and entry.export_id == body["id"]
    assert entry.token_id == tokens.ids[tokens["alpha"]]
    assert entry.client_address == "127.0.0.1"
    used = store.token_get(entry.token_id)
    assert used is not None and used.last_used_at is not None


def test_idempotency_key_replays_and_conflicts(api: Api):
    body = {"source": "main", "tables": ["events"]}
    key = {"Idempotency-Key": "order-42"}
    first = api.post("/v1/exports", json=body, headers=key)
    again = api.post("/v1/exports", json=body, headers=key)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = api.post("/v1/exports", json={**body, "format": "jsonl"}, headers=key)
    assert_problem(other, 409, "order-42", "different request")
    # the same key in another project is another export
    beta = api.post("/v1/exports", json=body, headers=key, token=api_token_beta(api))
    assert beta.status_code == 202 and beta.json()["id"] != first.json()["id"]


def api_token_beta(api: Api) -> str:
    from egress.domain.access import TokenRecord, hash_token, new_token
    from egress.domain.ids import new_id

    secret = new_token()
    api.app.state.store.token_create(TokenRecord(
        id=new_id("tok"), project="beta", name="b", token_hash=hash_token(secret),
        scopes=("admin",)))
    return secret


def test_invalid_requests_are_problems_that_say_what_is_allowed(api: Api):
    cases = [
        ({"source": "nope", "tables": ["events"]}, "configured sources: main"),
        ({"source": "sqlite:////etc/passwd.db", "tables": ["events"]}, "never a URL"),
        ({"source": "main", "tables": ["evnets"]}, "did you mean events"),
        ({"source": "main"}, "name at least one table"),
        ({"source": "main", "tables": ["events"], "all": True}, "not both"),
        ({"source": "main", "tables": ["events"], "destination": "mars"}, "known: local"),
        ({"source": "main", "tables": [{"name": "events", "columns": ["id", "nope"]}]},
         "'nope' not in table 'events'"),
        ({"source": "main", "tables": [{"name": "events", "filters": [
            {"column": "id", "op": ">", "value": "ten"}]}]}, "is not an integer"),
        ({"source": "main", "tables": [{"name": "events", "filters": [
            {"column": "id", "op": "in", "value": 3}]}]}, "takes a list"),
        ({"source": "main", "tables": [{"name": "events", "filters": [
            {"column": "kind", "op": "=", "value": None}]}]}, "use 'is_null'"),
        ({"source": "main", "tables": ["events"], "callback_url": "ftp://example.com/x"},
         "https"),
        ({"source": "main", "tables": ["events"], "row_group_size": 1024},
         "row_group_size applies to format parquet only"),
        ({"source": "main", "tables": ["events"], "format": "csv", "compression": "snappy"},
         "known: gzip, none, zstd"),
    ]
    for body, words in cases:
        assert_problem(api.post("/v1/exports", json=body), 422, words)
    # shapes are checked by the schema, with the location of each error
    bad = assert_problem(api.post("/v1/exports", json={"source": "main", "tables": [
        {"name": "events", "filters": [{"column": "id", "op": "LIKE", "value": 1}]}]}), 422)
    assert any("op" in e["loc"] for e in bad["errors"])
    unknown = assert_problem(api.post("/v1/exports", json={"source": "main", "tabels": []}), 422)
    assert any("tabels" in e["loc"] for e in unknown["errors"])
    assert_problem(api.post("/v1/exports", content=b"{not json",
                            headers={"Content-Type": "application/json"}), 400)
    assert api.get("/v1/exports").json()["items"] == []  # nothing was created


def test_free_form_query_needs_its_scope(api: Api, tokens: Tokens):
    # query exports themselves: test_api_query.py
    body = {"source": "main", "query": "SELECT 1 AS id", "key": ["id"]}
    assert_problem(api.post("/v1/exports", json=body, token=tokens["exports:create"]), 403,
                   "exports:query")


def test_list_filters_by_status_and_pages_with_a_cursor(api: Api):
    ids = [api.create()["id"] for _ in range(5)]
    cancelled = api.post(f"/v1/exports/{ids[1]}/cancel").json()
    assert cancelled["status"] == "cancelled"
    page = api.get("/v1/exports", params={"limit": 2}).json()
    assert [e["id"] for e in page["items"]] == [ids[4], ids[3]]
    seen = [e["id"] for e in page["items"]]
    while page["next_before"]:
        page = api.get("/v1/exports", params={"limit": 2, "before": page["next_before"]}).json()
        seen += [e["id"] for e in page["items"]]
    assert seen == ids[::-1]
    queued = api.get("/v1/exports", params=[("status", "queued")]).json()["items"]
    assert {e["id"] for e in queued} == set(ids) - {ids[1]}
    both = api.get("/v1/exports", params=[("status", "cancelled"), ("status", "failed")])
    assert [e["id"] for e in both.json()["items"]] == [ids[1]]
    assert_problem(api.get("/v1/exports", params={"status": "lost"}), 422, "status")


def test_cancel_retry_delete_rules(api: Api, store: SqlJobStore):
    export_id = api.create()["id"]
    assert_problem(api.delete(f"/v1/exports/{export_id}"), 422, "cancel export")
    assert_problem(api.post(f"/v1/exports/{export_id}/retry"), 422, "only a failed export")
    assert api.post(f"/v1/exports/{export_id}/cancel").json()["status"] == "cancelled"
    # cancelling again is harmless and answers the same state
    assert api.post(f"/v1/exports/{export_id}/cancel").json()["status"] == "cancelled"
    r = api.delete(f"/v1/exports/{export_id}")
    assert r.status_code == 204 and r.content == b""
    assert_problem(api.get(f"/v1/exports/{export_id}"), 404, export_id)
    assert_problem(api.delete(f"/v1/exports/{export_id}"), 404)
    actions = [e.action for e in store.audit_list("alpha", export_id=export_id)]
    assert actions == ["export.delete", "export.cancel", "export.cancel", "export.create"]


def test_delete_waits_for_a_table_still_stopping_after_the_cancel(api: Api, store: SqlJobStore):
    export_id = api.create()["id"]
    claimed = [t for t in store.task_claim("w1", lease_seconds=60, project_cap=10, limit=5)
               if t.export_id == export_id]
    assert claimed and claimed[0].lease_token is not None
    assert api.post(f"/v1/exports/{export_id}/cancel").json()["status"] == "cancelled"
    assert_problem(api.delete(f"/v1/exports/{export_id}"), 422, "still has a task stopping")
    assert api.get(f"/v1/exports/{export_id}").status_code == 200
    for task in claimed:  # its worker lets go
        assert task.lease_token is not None
        assert store.task_requeue(task.id, task.lease_token)
    assert api.delete(f"/v1/exports/{export_id}").status_code == 204
    assert_problem(api.get(f"/v1/exports/{export_id}"), 404, export_id)


def test_parquet_is_zstd_by_default_with_the_row_group_size_asked_for(api_worker: Api):
    import pyarrow.parquet as pq

    export_id = api_worker.create({"source": "main", "tables": ["events"],
                                   "format": "parquet", "row_group_size": 2048})["id"]
    view = api_worker.wait(export_id)
    assert view["status"] == "completed" and view["compression"] == "zstd"
    [data] = view["files"]
    got = api_worker.get(data["download_url"])
    meta = pq.ParquetFile(io.BytesIO(got.content)).metadata
    assert meta.num_rows == data["rows"] == view["rows"] > 0
    assert meta.num_row_groups > 1  # 2 KiB of rows a group
    assert meta.row_group(0).column(0).compression == "ZSTD"


def test_full_export_with_columns_and_filters(api_worker: Api, settings):
    body = {"source": "main", "format": "csv", "tables": [
        {"name": "events", "columns": ["kind", "id"],
         "filters": [{"column": "id", "op": "<=", "value": 100},
                     {"column": "kind", "op": "in", "value": ["buy", "view"]},
                     {"column": "amount", "op": "not_null"}]},
        "users"]}
    export_id = api_worker.create(body)["id"]
    view = api_worker.wait(export_id)
    assert view["status"] == "completed" and view["eta_seconds"] == 0.0
    assert view["finished_at"] and view["started_at"] and view["attempts"] == 0
    files = {f["name"]: f for f in view["files"]}
    assert set(files) == {"events.csv", "users.csv"}
    assert all(len(f["crc32c"]) == 8 and len(f["sha256"]) == 64 for f in files.values())
    events = files["events.csv"]
    got = api_worker.get(events["download_url"])
    assert got.status_code == 200 and len(got.content) == events["bytes"]
    rows = list(csv.reader(io.StringIO(got.text)))
    expected = [[("view" if i % 4 == 1 else "buy"), str(i)] for i in range(1, 101)
                if i % 4 in (1, 2) and i % 10 != 0]
    assert rows == [["kind", "id"], *expected]
    assert events["rows"] == len(expected) == view["tables"][0]["rows"]
    assert view["tables"][1]["rows"] == 40 and view["rows"] == len(expected) + 40
    manifest = json.loads(api_worker.get(f"/v1/exports/{export_id}/files/manifest.json").text)
    table = manifest["tables"][0]
    assert [c["name"] for c in table["schema"]] == ["kind", "id"]
    assert table["filters"][1] == {"column": "kind", "op": "in", "value": ["buy", "view"]}
    # no local path of the server is shown to API callers
    assert str(settings.home) not in json.dumps(view)


def test_per_project_limit_of_active_exports(make_api):
    api = make_api(max_active_exports=2)
    api.create()
    api.create()
    r = api.post("/v1/exports", json={"source": "main", "tables": ["users"]})
    assert_problem(r, 429, "api.max_active_exports")
    assert int(r.headers["Retry-After"]) > 0
    # another project is not held back by alpha's exports
    beta = api.post("/v1/exports", json={"source": "main", "tables": ["users"]},
                    token=api_token_beta(api))
    assert beta.status_code == 202


def test_body_size_limit(make_api):
    api = make_api(max_body_bytes=1024)
    big = {"source": "main", "tables": ["events"] * 200}
    assert_problem(api.post("/v1/exports", json=big), 413, "1024 bytes")

    def chunks():  # no Content-Length: the limit holds for streamed bodies too
        yield b'{"source": "main", "tables": ['
        for _ in range(200):
            yield b'"events",'
        yield b'"users"]}'

    assert_problem(api.post("/v1/exports", content=chunks(),
                            headers={"Content-Type": "application/json"}), 413)


def test_rate_limit_per_token(make_api, tokens: Tokens):
    api = make_api(rate_limit_per_second=0.5, rate_limit_burst=3)
    statuses = [api.get("/v1/exports").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    r = api.get("/v1/exports")
    assert_problem(r, 429, "rate limit")
    assert 1 <= int(r.headers["Retry-After"]) <= 2
    # each token has its own bucket
    assert api.get("/v1/exports", token=tokens["exports:read"]).status_code == 200
