"""Webhooks through the HTTP API: callback URLs checked at create time, deliveries and
attempts listed, replays, the signing secret read and rotated, project isolation.

The app runs on 127.0.0.1 (uvicorn) with an embedded worker; the receiver is allowed
by the explicit test settings (``allow_http``, ``allow_loopback``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook
from webhook_receiver import Receiver
from webhook_support import TEST_WEBHOOKS, wait_for

from apiharness import Api, LiveServer, Tokens, assert_problem, make_settings
from egress.api.app import create_app
from egress.store.sql import SqlJobStore
from jobsharness import make_events_db


@pytest.fixture
def api(tmp_path: Path, store: SqlJobStore) -> Iterator[Api]:
    source = tmp_path / "source.db"
    make_events_db(source, {"events": 200})
    settings = dataclasses.replace(
        make_settings(tmp_path / "home", "unused", source), webhooks=TEST_WEBHOOKS)
    tokens = Tokens(store)
    tokens.make("alpha", "admin", label="alpha")
    tokens.make("alpha", "exports:read", label="reader")
    tokens.make("beta", "admin", label="beta")
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(LiveServer(create_app(settings, store, run_worker=True)))
        client = stack.enter_context(httpx.Client(base_url=server.url, timeout=30))
        api = Api(client, tokens["alpha"], server.app)
        api.tokens = tokens  # type: ignore[attr-defined]
        yield api


def _deliveries(api: Api, export_id: str, **kwargs: object) -> list[dict]:
    r = api.get(f"/v1/exports/{export_id}/deliveries", **kwargs)
    assert r.status_code == 200, r.text
    return r.json()["deliveries"]


def test_an_export_with_a_callback_is_delivered_listed_and_replayed(
    api: Api, receiver: Receiver
):
    secret = api.get("/v1/webhook-secret").json()["secret"]
    export = api.create({"source": "main", "tables": ["events"],
                         "callback_url": receiver.url("/hook?x=1")})
    assert wait_for(lambda: receiver.requests, timeout=30)
    first = receiver.requests[0]
    event = Webhook(secret).verify(first.body, first.headers)
    assert event["type"] == "export.completed" and event["data"]["id"] == export["id"]

    [delivery] = wait_for(lambda: [d for d in _deliveries(api, export["id"])
                                   if d["state"] == "delivered"])
    assert delivery["id"] == first.headers["webhook-id"]
    assert delivery["event_type"] == "export.completed"
    assert delivery["url"] == receiver.url("/hook?x=1") and delivery["next_attempt_at"] is None
    [attempt] = delivery["attempt_log"]
    assert (attempt["attempt"], attempt["outcome"], attempt["status_code"],
            attempt["address"]) == (1, "success", 204, "127.0.0.1")

    r = api.post(f"/v1/exports/{export['id']}/deliveries/{delivery['id']}/replay")
    assert r.status_code == 202, r.text
    assert r.json()["state"] == "pending" and r.json()["id"] == delivery["id"]
    assert wait_for(lambda: len(receiver.requests) == 2, timeout=30)
    assert receiver.requests[1].headers["webhook-id"] == delivery["id"]
    Webhook(secret).verify(receiver.requests[1].body, receiver.requests[1].headers)
    [again] = wait_for(lambda: [d for d in _deliveries(api, export["id"])
                                if len(d["attempt_log"]) == 2])
    assert [a["outcome"] for a in again["attempt_log"]] == ["success", "success"]
    actions = [e.action for e in api.app.state.store.audit_list("alpha")]
    assert "delivery.replay" in actions and "webhook_secret.read" in actions


def test_a_cancelled_export_is_announced(api: Api, receiver: Receiver):
    receiver.default = 200
    export = api.create({"source": "main", "tables": ["events"],
                         "callback_url": receiver.url()})
    api.post(f"/v1/exports/{export['id']}/cancel")
    assert wait_for(lambda: receiver.requests, timeout=30)
    types = {Webhook(api.get("/v1/webhook-secret").json()["secret"]).verify(
        r.body, r.headers)["type"] for r in receiver.requests}
    # The export may have completed before the cancel reached it.
    assert types <= {"export.cancelled", "export.completed"} and len(types) == 1


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://169.254.169.254/latest", ("cloud metadata",)),
        ("https://167772161/x", ("10.0.0.1", "private")),
        ("https://[::ffff:10.0.0.1]/x", ("IPv4-mapped", "10.0.0.1")),
        ("https://user:secret@hooks.example.com/x", ("user name or password",)),
        ("https://0x0a000001/x", ("10.0.0.1", "private")),
    ],
)
def test_blocked_callback_urls_are_422_at_create(api: Api, url: str, words: tuple[str, ...]):
    r = api.post("/v1/exports", json={"source": "main", "tables": ["events"],
                                      "callback_url": url})
    assert_problem(r, 422, *words)


def test_http_callbacks_need_the_setting(tmp_path: Path, sqlite_store: SqlJobStore):
    source = tmp_path / "source.db"
    make_events_db(source, {"events": 10})
    settings = make_settings(tmp_path / "home", "unused", source)  # default webhooks
    token = Tokens(sqlite_store).make("alpha", "admin")
    with LiveServer(create_app(settings, sqlite_store)) as server, \
            httpx.Client(base_url=server.url) as client:
        api = Api(client, token)
        r = api.post("/v1/exports", json={"source": "main", "tables": ["events"],
                                          "callback_url": "http://hooks.example.com/x"})
        assert_problem(r, 422, "use https", "webhooks.allow_http")
        r = api.post("/v1/exports", json={"source": "main", "tables": ["events"],
                                          "callback_url": "https://127.0.0.1:9/x"})
        assert_problem(r, 422, "loopback")
        ok = api.post("/v1/exports", json={"source": "main", "tables": ["events"],
                                           "callback_url": "https://hooks.example.com/x"})
        assert ok.status_code == 202, ok.text


def test_rotation_over_the_api_signs_with_both_secrets(api: Api, receiver: Receiver):
    old = api.get("/v1/webhook-secret").json()
    assert old["secret"].startswith("whsec_") and len(old["active"]) == 1
    r = api.post("/v1/webhook-secret:rotate", json={"previous_expires_in": 600})
    assert r.status_code == 200, r.text
    new = r.json()
    assert new["secret"] != old["secret"] and [v["generation"] for v in new["active"]] == [2, 1]
    assert new["active"][0]["expires_at"] is None and new["active"][1]["expires_at"]
    assert api.get("/v1/webhook-secret").json() == new
    api.create({"source": "main", "tables": ["events"], "callback_url": receiver.url()})
    assert wait_for(lambda: receiver.requests, timeout=30)
    got = receiver.requests[0]
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    Webhook(old["secret"]).verify(got.body, got.headers)
    Webhook(new["secret"]).verify(got.body, got.headers)
    # At once: only the newest signs from now on.
    now = api.post("/v1/webhook-secret:rotate", json={"previous_expires_in": 0}).json()
    assert [v["generation"] for v in now["active"]] == [3]
    assert_problem(api.post("/v1/webhook-secret:rotate", json={"previous_expires_in": -1}),
                   422)
    assert_problem(api.post("/v1/webhook-secret:rotate", json={"grace": 5}), 422)
    # No body: the configured grace.
    default = api.post("/v1/webhook-secret:rotate").json()
    assert len(default["active"]) == 2


def test_other_projects_and_missing_scopes_see_nothing(api: Api, receiver: Receiver):
    tokens: Tokens = api.tokens  # type: ignore[attr-defined]
    export = api.create({"source": "main", "tables": ["events"],
                         "callback_url": receiver.url()})
    [delivery] = wait_for(lambda: _deliveries(api, export["id"]), timeout=30)
    base = f"/v1/exports/{export['id']}/deliveries"
    beta = tokens["beta"]
    assert_problem(api.get(base, token=beta), 404, export["id"])
    assert_problem(api.post(f"{base}/{delivery['id']}/replay", token=beta), 404)
    assert_problem(api.post(f"{base}/dlv_nope/replay"), 404, "dlv_nope")
    assert_problem(api.get("/v1/exports/exp_nope/deliveries"), 404)
    # beta's secret is its own.
    assert (api.get("/v1/webhook-secret", token=beta).json()["secret"]
            != api.get("/v1/webhook-secret").json()["secret"])
    reader = tokens["reader"]
    assert api.get(base, token=reader).status_code == 200
    assert_problem(api.post(f"{base}/{delivery['id']}/replay", token=reader), 403,
                   "exports:create")
    assert_problem(api.get("/v1/webhook-secret", token=reader), 403, "admin")
    assert_problem(api.post("/v1/webhook-secret:rotate", token=reader), 403, "admin")
    assert_problem(api.get(base, token="egr_not-a-token"), 401)
