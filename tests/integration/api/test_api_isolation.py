"""Two projects: every route that takes an export id, called with project alpha's ids.

Project beta's token → 404 (as for an id that does not exist: never 403, never data);
no token → 401; a token without the route's scope → 403. The routes are read from
the app's OpenAPI document, so a route added later is covered (or fails here until it is).
"""

from __future__ import annotations

import time

import httpx
import pytest

from apiharness import Api, Tokens, assert_problem

#: Bodies of routes that take one (valid ones, so only access can fail).
BODIES = {
    ("POST", "/v1/exports/{export_id}/links"): {"file": "users.csv"},
}
#: Things of alpha's export that must never appear in an answer to someone else.
SECRETS_OF_ALPHA = ("users.csv", "payload", "id,user_id", "download_url", "rows_estimate")


def export_routes(api: Api) -> list[tuple[str, str]]:
    """(method, path) of every operation the app publishes that takes an export id."""
    paths = api.get("/openapi.json").json()["paths"]
    return [(method.upper(), path) for path, operations in paths.items()
            if "{export_id}" in path for method in operations]


def call(client: httpx.Client, method: str, path: str, export_id: str, token: str | None
         ) -> httpx.Response:
    url = path.replace("{export_id}", export_id).replace("{name}", "users.csv")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.request(method, url, headers=headers, json=BODIES.get((method, path)),
                          timeout=10)


def assert_no_data(r: httpx.Response) -> None:
    for secret in SECRETS_OF_ALPHA:
        assert secret not in r.text, (r.request.url, r.text)


@pytest.fixture
def alpha_export(api_worker: Api) -> str:
    export_id = api_worker.create({"source": "main", "tables": ["users"]})["id"]
    api_worker.wait(export_id)
    return export_id


def test_every_route_with_another_projects_id(api_worker: Api, tokens: Tokens,
                                              alpha_export: str):
    routes = export_routes(api_worker)
    covered = {path for _, path in routes}
    # the routes this suite knows about are all there
    assert {"/v1/exports/{export_id}", "/v1/exports/{export_id}/cancel",
            "/v1/exports/{export_id}/retry", "/v1/exports/{export_id}/files/{name}",
            "/v1/exports/{export_id}/links", "/v1/exports/{export_id}/events"} <= covered
    client = api_worker.client
    missing = "exp_000000000000" + "0" * 14
    for method, path in routes:
        beta = call(client, method, path, alpha_export, tokens["beta"])
        assert_problem(beta, 404)
        assert_no_data(beta)
        # exactly what a missing id answers
        gone = call(client, method, path, missing, tokens["beta"])
        assert gone.status_code == 404
        assert beta.json()["title"] == gone.json()["title"]
        anonymous = call(client, method, path, alpha_export, None)
        assert_problem(anonymous, 401, "Bearer")
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert_no_data(anonymous)
        wrong = call(client, method, path, alpha_export, "egr_" + "x" * 43)
        assert_problem(wrong, 401, "unknown or revoked")
        scoped = call(client, method, path, alpha_export, tokens["exports:query"])
        assert_problem(scoped, 403, "scope")
        assert_no_data(scoped)
    # and nothing of alpha changed: the export is still there, complete
    view = api_worker.get(f"/v1/exports/{alpha_export}").json()
    assert view["status"] == "completed" and view["files"]


def test_listing_and_idempotency_keys_are_per_project(api_worker: Api, tokens: Tokens,
                                                      alpha_export: str):
    listed = api_worker.get("/v1/exports", token=tokens["beta"]).json()
    assert listed == {"items": [], "next_before": None}
    body = {"source": "main", "tables": ["users"]}
    key = {"Idempotency-Key": "same-key"}
    a = api_worker.post("/v1/exports", json=body, headers=key)
    b = api_worker.post("/v1/exports", json=body, headers=key, token=tokens["beta"])
    assert a.status_code == b.status_code == 202 and a.json()["id"] != b.json()["id"]
    assert [e["id"] for e in api_worker.get("/v1/exports", token=tokens["beta"]).json()[
        "items"]] == [b.json()["id"]]


def test_scopes_of_each_kind(api: Api, tokens: Tokens):
    export_id = api.create({"source": "main", "tables": ["users"]})["id"]
    read, create, cancel = (tokens[s] for s in ("exports:read", "exports:create",
                                                "exports:cancel"))
    assert api.get(f"/v1/exports/{export_id}", token=read).status_code == 200
    assert_problem(api.post("/v1/exports", json={"source": "main", "tables": ["users"]},
                            token=read), 403, "exports:create")
    assert_problem(api.post(f"/v1/exports/{export_id}/cancel", token=create), 403,
                   "exports:cancel")
    assert_problem(api.get(f"/v1/exports/{export_id}", token=cancel), 403, "exports:read")
    assert api.post(f"/v1/exports/{export_id}/cancel", token=cancel).status_code == 200
    assert api.get("/v1/sources", token=read).status_code == 200
    # a revoked token stops working at once
    api.app.state.store.token_revoke(tokens.ids[read])
    time.sleep(0)  # no cache: the next request sees it
    assert_problem(api.get("/v1/sources", token=read), 401, "revoked")
    assert_problem(api.get("/v1/sources", headers={"Authorization": "Basic abc"}), 401,
                   "Bearer")
