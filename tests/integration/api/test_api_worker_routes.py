"""The internal worker routes (``egress worker --api``): a worker with no database
credentials runs exports through the API with the store's own fencing, and a worker token
opens nothing else."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from apiharness import Api, Tokens, assert_problem
from egress.config import Settings
from egress.domain.access import check_scopes
from egress.domain.jobs import ExportState, Heartbeat
from egress.exceptions import ConfigError, StoreError
from egress.manager import export_root
from egress.store.base import WORKER_OPERATIONS, JobStore, WorkerStore
from egress.store.over_api import ApiWorkerStore, WorkerTokenRefused, open_worker_store
from egress.store.wire import WireError, decode, encode
from egress.worker.loop import Worker
from jobsharness import output_files

WORKER = "/internal/v1/worker/"


def _run_worker(store: WorkerStore, settings: Settings, name: str) -> None:
    worker = Worker(store, settings, name=name)
    thread = threading.Thread(target=worker.run, kwargs={"exit_when_idle": True}, daemon=True)
    thread.start()
    thread.join(90)
    assert not thread.is_alive(), "the worker did not finish"


def test_a_worker_over_the_api_exports_the_bytes_a_direct_worker_does(
    api: Api, settings: Settings, store: JobStore, tokens: Tokens
) -> None:
    body = {"source": "main", "tables": ["events", "users"], "format": "csv",
            "compression": "gzip"}
    over_api = api.create(body)
    remote = open_worker_store(str(api.client.base_url), tokens.make("fleet", "worker"))
    try:
        _run_worker(remote, settings, "api-worker")
    finally:
        remote.close()  # type: ignore[attr-defined]
    assert api.wait(over_api["id"])["status"] == "completed"
    direct = api.create(body)
    _run_worker(store, settings, "direct-worker")
    assert api.wait(direct["id"])["status"] == "completed"
    via_api = output_files(export_root(settings, store.export_get(None, over_api["id"])))
    via_db = output_files(export_root(settings, store.export_get(None, direct["id"])))
    assert via_api and via_api == via_db
    # the API worker claimed every task of its export, under the store's own leases
    tasks = store.task_list(over_api["id"])
    workers = {e.worker for t in tasks for e in store.lease_events(t.id) if e.kind == "claim"}
    assert workers == {"api-worker"}


def test_the_store_fences_a_worker_over_the_api_like_a_direct_one(
    api: Api, store: JobStore, tokens: Tokens
) -> None:
    view = api.create()
    remote = ApiWorkerStore(str(api.client.base_url), tokens.make("fleet", "worker"))
    try:
        [task] = remote.call("task_claim", "w1", lease_seconds=30, project_cap=4)
        assert task.export_id == view["id"] and task.lease_token
        stale = "not-the-lease"
        assert remote.call("task_commit", task.id, stale, checkpoint={}, rows=1, bytes=1) is False
        assert remote.call("task_heartbeat", task.id, stale, 30) == Heartbeat(alive=False)
        assert remote.call("task_finish", task.id, stale) is False
        beat = remote.call("task_heartbeat", task.id, task.lease_token, 30)
        assert beat.alive and beat.lease_expires_at > remote.call("now")
        assert remote.call("task_requeue", task.id, task.lease_token) is True
        assert store.task_get(task.id).state.value == "queued"
        assert remote.call("export_get", None, view["id"]).state is ExportState.RUNNING
    finally:
        remote.close()


def test_worker_routes_refuse_other_tokens_and_bad_calls(api: Api, tokens: Tokens) -> None:
    worker = tokens.make("fleet", "worker")
    # a project's admin is not the fleet
    assert_problem(api.post(WORKER + "now", json={}), 403, "scope 'worker'")
    assert_problem(api.post(WORKER + "now", json={}, token=tokens["exports:read"]), 403)
    assert_problem(api.client.post(WORKER + "now", json={}), 401)
    assert api.post(WORKER + "now", json={}, token=worker).status_code == 200
    for name in ("token_create", "export_create", "audit_list", "__init__", "migrate"):
        assert_problem(api.post(WORKER + name, json={}, token=worker), 404, "known:")
    assert_problem(api.post(WORKER + "task_get", json={"args": []}, token=worker), 422,
                   "task_get")
    assert_problem(api.post(WORKER + "task_get", json={"args": ["t"], "kwargs": {"x": 1}},
                            token=worker), 422)
    forged = {"args": [{"$t": "record", "c": "TokenRecord", "v": {}}]}
    assert_problem(api.post(WORKER + "task_get", json=forged, token=worker), 422,
                   "TokenRecord")


def test_a_worker_token_opens_no_public_route(api: Api, tokens: Tokens) -> None:
    worker = tokens.make("fleet", "worker")
    schema = api.get("/openapi.json").json()
    checked = 0
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if not operation.get("security"):
                continue  # /healthz, /metrics, signed links: no token involved
            url = re.sub(r"\{[^}]+\}", "exp_0123abcd", path)
            r = api.request(method.upper(), url, token=worker, json={})
            assert_problem(r, 403, "worker token")
            checked += 1
    assert checked >= 15
    assert not any(p.startswith("/internal/") for p in schema["paths"])
    # nor does it sign in to the web page
    page = api.client.get("/")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    form = {"token": worker, **({"csrf": csrf.group(1)} if csrf else {})}
    signed = api.client.post("/login", data=form)
    assert signed.status_code == 403 and "worker token" in signed.text


def test_a_bad_url_or_token_fails_a_worker_at_start(api: Api, tokens: Tokens) -> None:
    base = str(api.client.base_url)
    with pytest.raises(WorkerTokenRefused, match="refused the worker token"):
        open_worker_store(base, tokens["alpha"])
    with pytest.raises(ConfigError, match="a worker token is needed"):
        open_worker_store(base, "")
    with pytest.raises(ConfigError, match="bad API URL"):
        open_worker_store("127.0.0.1:1", "egr_x")
    # a port nobody listens on: the store is "away" (the worker retries such errors)
    with pytest.raises(StoreError, match="cannot be reached"):
        open_worker_store("http://127.0.0.1:9", tokens.make("fleet", "worker"))


def test_worker_scope_stands_alone_and_admin_does_not_imply_it() -> None:
    assert check_scopes(["worker"]) == ("worker",)
    with pytest.raises(ConfigError, match="stands alone"):
        check_scopes(["worker", "exports:read"])
    from egress.domain.access import Principal

    admin = Principal(project="p", token_id="t", scopes=frozenset({"admin"}))
    assert admin.has("exports:create") and not admin.has("worker")


def test_the_wire_form_round_trips_records_and_refuses_other_types(store: JobStore) -> None:
    from egress.domain.jobs import ExportRecord

    record = ExportRecord(id="exp_1", project="p", source="s", tables=("a", "b"), format="csv",
                          compression="none", destination="local", state=ExportState.QUEUED,
                          options={"$t": "user data", "nested": [1, (2, 3)]},
                          manifest={"b": b"\x00\xff"})
    assert decode(encode(record)) == record
    assert decode(encode([(1, "x"), None, {"k": ExportState.FAILED}])) == [
        (1, "x"), None, {"k": ExportState.FAILED}]
    with pytest.raises(WireError, match="cannot send a PosixPath"):
        encode(Path("/"))
    newer = {"$t": "record", "c": "Heartbeat", "v": {"alive": True, "evil": 1}}
    with pytest.raises(WireError, match="unknown fields"):
        decode(newer)  # the API refuses what it does not know
    assert decode(newer, strict=False) == Heartbeat(alive=True)  # a worker drops it
    # every worker operation exists on the store, and nothing that creates or reads tenants'
    # data for callers is among them
    assert all(callable(getattr(store, name)) for name in WORKER_OPERATIONS)
    assert not any(n.startswith(("token_", "audit_")) or n in ("export_create", "export_list")
                   for n in WORKER_OPERATIONS)
