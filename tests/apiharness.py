"""Helpers for the HTTP API tests: settings, tokens, a client, problem assertions."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from egress.config import ApiSettings, ExportDefaults, Settings, WorkerSettings
from egress.domain.access import TokenRecord, hash_token, new_token
from egress.domain.ids import new_id
from egress.store.base import JobStore
from pgserver import free_port

#: A test link key (the settings' minimum is 32 characters).
LINK_KEY = "test-link-key-" + "k" * 32
FAST_WORKER = WorkerSettings(
    concurrency=2, lease_seconds=10.0, heartbeat_seconds=0.5, slice_seconds=1.0,
    reconcile_seconds=0.1, poll_seconds=0.05, grace_seconds=5.0, backoff_seconds=0.1,
    nice=0,  # the suite's groups share the machine (worker.nice has tests of its own)
)


def make_settings(home: Path, store_url: str, source_db: Path, **api: Any) -> Settings:
    return Settings(
        home=home,
        store_url=store_url,
        sources={"main": f"sqlite:///{source_db}"},
        destinations={"local": {"type": "local", "path": str(home / "exports")}},
        worker=FAST_WORKER,
        api=replace(ApiSettings(link_signing_key=LINK_KEY), **api),
        allow_source_urls=False,
        # moto lists every multipart upload as initiated on 2010-11-10: the reconciler's
        # sweep of orphaned uploads would abort the upload of a running export (its first
        # sweep runs when the worker starts). The sweep has tests of its own.
        export=ExportDefaults(orphan_sweep_seconds=float("inf")),
    )


@dataclass
class Tokens:
    store: JobStore
    made: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)

    def make(self, project: str, *scopes: str, label: str | None = None) -> str:
        secret = new_token()
        record = self.store.token_create(TokenRecord(
            id=new_id("tok"), project=project, name=label or "test",
            token_hash=hash_token(secret), scopes=scopes))
        self.ids[secret] = record.id
        if label:
            self.made[label] = secret
        return secret

    def __getitem__(self, label: str) -> str:
        return self.made[label]


class LiveServer:
    """An ASGI app served by uvicorn on 127.0.0.1 in a thread (lifespan included)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        # timeout_keep_alive: uvicorn closes a connection idle for 5 s by default, and a
        # client that reuses it at that very moment reads a reset (ECONNRESET): under CI's
        # load a burst's connections sat idle that long. Clients of a real deployment
        # retry; a test's requests must not race the server's clock.
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                                timeout_graceful_shutdown=5, timeout_keep_alive=600)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="uvicorn", daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def serve_process(home: Path, log: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """``egress serve`` on a free port, once it answers ``/readyz``; its output in ``log``."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "egress.cli", "serve", "--home", str(home), "--port",
             str(port), *options], stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(log.read_text())
        time.sleep(0.1)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Api:
    """A test client with the project ``alpha``'s admin token by default."""

    client: httpx.Client
    token: str
    app: Any = None

    def request(self, method: str, url: str, *, token: str | None = None,
                **kwargs: Any) -> httpx.Response:
        headers = {**auth(token or self.token), **kwargs.pop("headers", {})}
        return self.client.request(method, url, headers=headers, **kwargs)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)

    def create(self, body: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        r = self.post("/v1/exports", json=body or {"source": "main", "tables": ["events"]},
                      **kwargs)
        assert r.status_code == 202, r.text
        return r.json()

    def wait(self, export_id: str, *states: str, timeout: float = 30.0) -> dict[str, Any]:
        states = states or ("completed",)
        deadline = time.monotonic() + timeout
        while True:
            view = self.get(f"/v1/exports/{export_id}").json()
            if view["status"] in states:
                return view
            assert time.monotonic() < deadline, f"export stuck: {view}"
            assert view["status"] not in ("failed", "cancelled"), view
            time.sleep(0.05)



def assert_problem(r: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body = r.json()
    assert body["status"] == status and body["type"].startswith("urn:egress:problem:")
    assert body["title"] and body["detail"]
    for word in words:
        assert word in body["detail"], body
    return body
