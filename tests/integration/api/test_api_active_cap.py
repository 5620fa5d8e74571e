"""The per-project cap on active exports holds when many creates arrive at once."""

from __future__ import annotations

import threading

import httpx

from apiharness import auth

CAP = 5
CALLERS = 12
BODY = {"source": "main", "tables": ["users"]}


def test_concurrent_creates_never_pass_the_active_export_cap(make_api, store):
    api = make_api(max_active_exports=CAP)
    start = threading.Barrier(CALLERS)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def create() -> None:
        with httpx.Client(base_url=str(api.client.base_url), timeout=60) as client:
            client.get("/healthz")  # connected before the barrier: all post together
            start.wait(timeout=60)
            r = client.post("/v1/exports", json=BODY, headers=auth(api.token))
        with lock:
            answers.append(r)

    threads = [threading.Thread(target=create) for _ in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [202] * CAP + [429] * (CALLERS - CAP), [r.text for r in answers]
    for r in answers:
        if r.status_code == 429:
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "api.max_active_exports" in r.json()["detail"]
            assert int(r.headers["Retry-After"]) > 0
    assert store.export_count_active("alpha") == CAP
