"""The web page over plain HTTP (httpx, no browser): security headers on every page, the
session cookie's flags and signature, CSRF on every form post, revoked tokens, project
isolation. The browser acceptance is in tests/browser."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from apiharness import LiveServer, Tokens, auth, make_settings
from egress.domain.access import hash_token
from egress.store.sql import SqlJobStore
from egress.web import create_site
from egress.web.session import COOKIE, Session, encode_session, session_key

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Site:
    def __init__(self, client: httpx.Client, tokens: Tokens, store: SqlJobStore,
                 key: bytes) -> None:
        self.client, self.tokens, self.store, self.key = client, tokens, store, key

    def csrf(self, url: str = "/") -> str:
        r = self.client.get(url)
        found = CSRF.search(r.text)
        assert found, r.text
        return found.group(1)

    def sign_in(self, token: str) -> httpx.Response:
        return self.client.post("/login", data={"csrf": self.csrf(), "token": token})

    def create(self, token: str) -> str:
        r = self.client.post("/v1/exports", json={"source": "main", "tables": ["users"]},
                             headers=auth(token))
        assert r.status_code == 202, r.text
        return str(r.json()["id"])


@pytest.fixture
def site(tmp_path: Path, sqlite_store_url: str, source_db: Path) -> Iterator[Site]:
    settings = make_settings(tmp_path / "home", sqlite_store_url, source_db)
    settings = replace(settings, api=replace(settings.api, rate_limit_burst=1000))
    store = SqlJobStore(settings.store_url)
    tokens = Tokens(store)
    tokens.make("alpha", "admin", label="alpha")
    tokens.make("alpha", "exports:read", label="reader")
    tokens.make("beta", "admin", label="beta")
    app = create_site(settings, store)  # no worker: exports stay queued
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield Site(client, tokens, store, session_key(app.state.link_key))
    store.close()


def _assert_secure(r: httpx.Response) -> None:
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp, csp
    assert "frame-ancestors 'none'" in csp and r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["content-type"].startswith("text/html")
    assert "<script>" not in r.text and " style=" not in r.text  # nothing inline


def test_every_page_has_the_security_headers(site: Site):
    export_id = site.create(site.tokens["alpha"])
    beta_id = site.create(site.tokens["beta"])
    _assert_secure(site.client.get("/"))
    _assert_secure(site.client.get("/exports"))  # signed out: the sign-in page, 401
    assert site.sign_in(site.tokens["alpha"]).status_code == 303
    for url, status in (("/exports", 200), ("/exports?status=queued", 200),
                        (f"/exports/{export_id}", 200), ("/exports/new", 200),
                        ("/exports/new?source=main", 200), (f"/exports/{beta_id}", 404),
                        ("/exports?status=bogus", 422)):
        r = site.client.get(url)
        assert r.status_code == status, (url, r.text)
        _assert_secure(r)
    # the API keeps its JSON problems; /docs keeps working (its own inline script)
    assert site.client.get("/docs").status_code == 200


def test_session_cookie_flags_and_signature(site: Site):
    token = site.tokens["alpha"]
    r = site.sign_in(token)
    assert r.status_code == 303 and r.headers["location"] == "/exports"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    flags = {f.strip().lower() for f in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= flags, cookie
    assert any(f.startswith("max-age=") and 0 < int(f[8:]) <= 8 * 3600 for f in flags)
    value = site.client.cookies[COOKIE]
    assert token not in value and token[4:] not in value  # the token is never in the cookie
    assert site.client.get("/exports").status_code == 200

    # a tampered cookie is not a session
    payload, signature = value.split(".")
    site.client.cookies.set(COOKIE, f"{payload}.{signature[:-2]}AA")
    r = site.client.get("/exports")
    assert r.status_code == 401 and 'name="token"' in r.text and "exports/exp_" not in r.text
    # nor an expired one, even with a right signature
    expired = Session(digest=hash_token(token), csrf="x", expires_at=int(time.time()) - 1)
    site.client.cookies.set(COOKIE, encode_session(site.key, expired))
    r = site.client.get("/exports")
    assert r.status_code == 401 and "session has ended" in r.text


def test_a_wrong_or_revoked_token_gets_a_message_and_no_data(site: Site):
    export_id = site.create(site.tokens["alpha"])
    r = site.sign_in("egr_" + "x" * 40)
    assert r.status_code == 401 and "unknown or was revoked" in r.text
    assert COOKIE in r.headers.get("set-cookie", "")  # an anonymous session, for its CSRF
    assert site.client.get("/exports").status_code == 401
    assert site.sign_in(site.tokens["alpha"]).status_code == 303
    assert export_id in site.client.get("/exports").text
    session = site.client.cookies[COOKIE]
    site.store.token_revoke(site.tokens.ids[site.tokens["alpha"]])
    for url in ("/exports", f"/exports/{export_id}", f"/exports/{export_id}/events"):
        site.client.cookies.set(COOKIE, session)  # the answer replaces it: put it back
        r = site.client.get(url)
        assert r.status_code == 401, (url, r.text)
        assert "unknown or was revoked" in r.text and export_id not in r.text


def test_form_posts_without_the_csrf_token_are_refused(site: Site):
    export_id = site.create(site.tokens["alpha"])
    # sign-in itself needs the token of the anonymous session
    r = site.client.post("/login", data={"token": site.tokens["alpha"]})
    assert r.status_code == 403 and "CSRF" in r.text
    assert site.sign_in(site.tokens["alpha"]).status_code == 303
    good = site.csrf(f"/exports/{export_id}")
    for data in ({}, {"csrf": ""}, {"csrf": good + "x"}):
        r = site.client.post(f"/exports/{export_id}/cancel", data=data)
        assert r.status_code == 403 and "Form refused" in r.text, r.text
    # a JSON body is no form, whatever it carries
    r = site.client.post(f"/exports/{export_id}/cancel", json={"csrf": good})
    assert r.status_code == 403
    r = site.client.post("/exports/new", data={"source": "main", "table": "users",
                                               "action": "start"})
    assert r.status_code == 403
    assert site.store.export_get("alpha", export_id).state == "queued"  # nothing happened
    assert len(site.store.export_list("alpha", limit=10)) == 1
    # with it: done
    r = site.client.post(f"/exports/{export_id}/cancel", data={"csrf": good})
    assert r.status_code == 303 and site.store.export_get("alpha", export_id).state == "cancelled"


def test_another_projects_export_is_not_found_and_scopes_hold(site: Site):
    beta_id = site.create(site.tokens["beta"])
    assert site.sign_in(site.tokens["reader"]).status_code == 303
    csrf = site.csrf("/exports")
    for method, url in (("GET", f"/exports/{beta_id}"), ("GET", f"/exports/{beta_id}/events"),
                        ("GET", f"/live/exports?id={beta_id}"),
                        ("GET", f"/exports/{beta_id}/files/users.csv"),
                        ("POST", f"/exports/{beta_id}/cancel")):
        r = site.client.request(method, url, data={"csrf": csrf} if method == "POST" else None)
        # reading: not found; cancelling: the reader may not (checked before the lookup)
        assert r.status_code == (403 if method == "POST" else 404), (url, r.text)
        assert "users" not in r.text or "cancel" in r.text
    r = site.client.get("/exports/new")
    assert r.status_code == 403 and "exports:create" in r.text
    assert site.store.export_get("beta", beta_id).state == "queued"


def _events(client: httpx.Client, url: str, wanted: int, seconds: float = 15.0) -> list[str]:
    """The first ``wanted`` event lines (``event: …``) of the stream at ``url``."""
    seen: list[str] = []
    with client.stream("GET", url, timeout=seconds) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("event:") or line.startswith("data:"):
                seen.append(line)
            if sum(1 for s in seen if s.startswith("event:")) >= wanted:
                break
    return seen


def test_the_list_stream_announces_new_exports_of_the_project_only(site: Site):
    alpha, beta = site.tokens["alpha"], site.tokens["beta"]
    shown = site.create(alpha)
    assert site.sign_in(alpha).status_code in (200, 303)
    page = site.client.get("/exports").text
    assert f"after={shown}" in page.replace("&amp;", "&")
    import threading

    made: list[str] = []

    def create_later() -> None:
        time.sleep(0.5)
        made.append(site.create(beta))  # another project: never announced
        made.append(site.create(alpha))

    threading.Thread(target=create_later).start()
    lines = _events(site.client, f"/live/exports?after={shown}", wanted=2)
    created = [json.loads(lines[i + 1][5:]) for i, line in enumerate(lines)
               if line == "event: created"]
    assert created == [{"id": made[1]}], lines
    # its row, as the list draws it; another project's export is not found
    row = site.client.get(f"/live/rows?id={made[1]}")
    assert row.status_code == 200 and f'data-export="{made[1]}"' in row.text
    assert site.client.get(f"/live/rows?id={made[0]}").status_code == 404
    # a stream with nothing to watch and nothing to look for is refused
    assert site.client.get("/live/exports").status_code == 422
