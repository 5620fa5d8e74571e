"""The per-process cache of verified tokens (api/auth.py) keeps every security property:
a revocation through this process's store ends a token at the next request, one made by
another process within the cache's lifetime; unknown and revoked tokens are never
served from it; ``last_used_at`` is still written; the active-export cap still holds."""

from __future__ import annotations

import time

from apiharness import Api, Tokens, assert_problem
from egress.api.auth import TokenCache
from egress.store.sql import SqlJobStore

BODY = {"source": "main", "tables": ["users"]}


def test_revocation_through_this_store_ends_a_cached_token_at_once(api: Api, tokens: Tokens):
    read = tokens["exports:read"]
    for _ in range(3):  # cached by now
        assert api.get("/v1/sources", token=read).status_code == 200
    api.app.state.store.token_revoke(tokens.ids[read])
    assert_problem(api.get("/v1/sources", token=read), 401, "revoked")
    # the other tokens of the project stay valid
    assert api.get("/v1/sources").status_code == 200


def test_revocation_by_another_process_ends_a_token_within_the_cache_lifetime(
    api: Api, tokens: Tokens, store: SqlJobStore
):
    ttl = 0.5
    api.app.state.token_cache = TokenCache(ttl=ttl)
    read = tokens["exports:read"]
    assert api.get("/v1/sources", token=read).status_code == 200
    # another store object on the same database: another process, as the server sees it
    other = SqlJobStore(store.engine.url.render_as_string(hide_password=False))
    try:
        assert other.token_revoke(tokens.ids[read]) is not None
    finally:
        other.close()
    revoked_at = time.monotonic()
    while api.get("/v1/sources", token=read).status_code == 200:
        assert time.monotonic() - revoked_at < ttl + 5, "the revoked token kept working"
        time.sleep(0.05)
    assert_problem(api.get("/v1/sources", token=read), 401, "revoked")


def test_unknown_and_revoked_tokens_are_refused_every_time(api: Api, tokens: Tokens):
    cancel = tokens["exports:cancel"]
    api.app.state.store.token_revoke(tokens.ids[cancel])
    for _ in range(3):
        assert_problem(api.get("/v1/sources", token=cancel), 401, "revoked")
        assert_problem(api.get("/v1/sources", token="egr_" + "x" * 43), 401, "unknown")
    # only tokens that were let in are ever cached (none of the above)
    assert not api.app.state.token_cache._entries


def test_last_use_is_recorded_with_the_cache(make_api, tokens: Tokens, store: SqlJobStore):
    api = make_api(token_touch_seconds=0.2)
    read = tokens["exports:read"]
    token_id = tokens.ids[read]

    def last_used() -> float | None:
        return next(t.last_used_at for t in store.token_list("alpha") if t.id == token_id)

    assert last_used() is None
    assert api.get("/v1/sources", token=read).status_code == 200
    first = last_used()
    assert first is not None
    time.sleep(0.3)
    assert api.get("/v1/sources", token=read).status_code == 200  # served from the cache
    assert last_used() > first


def test_scopes_and_projects_hold_for_cached_tokens(api: Api, tokens: Tokens):
    export_id = api.create(BODY)["id"]
    read = tokens["exports:read"]
    for _ in range(2):
        assert api.get(f"/v1/exports/{export_id}", token=read).status_code == 200
        assert_problem(api.post("/v1/exports", json=BODY, token=read), 403, "exports:create")
        assert_problem(api.get(f"/v1/exports/{export_id}", token=tokens["beta"]), 404)


def test_the_active_export_cap_counts_only_this_projects_queued_exports(make_api,
                                                                        tokens: Tokens):
    api = make_api(max_active_exports=2)
    first = api.create(BODY)["id"]
    api.create(BODY)
    assert_problem(api.post("/v1/exports", json=BODY), 429, "max_active_exports")
    # another project has its own cap
    assert api.post("/v1/exports", json=BODY, token=tokens["beta"]).status_code == 202
    # a cancelled export no longer counts
    assert api.post(f"/v1/exports/{first}/cancel").status_code == 200
    assert api.post("/v1/exports", json=BODY).status_code == 202
    assert_problem(api.post("/v1/exports", json=BODY), 429, "max_active_exports")
