"""Exports that fail in the worker: API callers get a plain, classified ``error`` without
hosts, ports, users, file paths or passwords; ``admin`` tokens and the server log get the
detail with every credential masked; the CLI shows the detail, masked too. The source URLs
carry their password in the query string and in userinfo with characters (``#``, ``/``,
``@``) that libpq and Python's ``urlsplit`` read differently."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from apiharness import Api, LiveServer, Tokens
from egress.api.app import create_app
from egress.cli import main
from egress.config import WebhookSettings
from egress.exceptions import SourceUnavailableError
from egress.failures import describe_failure
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from jobsharness import make_events_db
from logcapture import LogCapture, capturing_logs
from pgserver import free_port

PASSWORD = "Zr9-pw#with/odd@chars"
#: No part of the password may show, however a parser split it.
FRAGMENTS = ("Zr9-pw", "with/odd", "odd@chars", "Zr9-pw%23")


@pytest.fixture
def captured() -> Iterator[LogCapture]:
    with capturing_logs() as handler:
        yield handler


def _no_password(text: str, where: str) -> None:
    for fragment in FRAGMENTS:
        assert fragment not in text, f"{fragment!r} in {where}: {text[:2000]}"


def _query_url(pg_url: str, port: int) -> str:
    """The database of ``pg_url`` with user and password in the query string."""
    parts = urlsplit(pg_url)
    return (f"postgresql://{parts.hostname}:{port}{parts.path}"
            f"?user=postgres&password={PASSWORD}&connect_timeout=5")


def _run_worker_until_failed(store: SqlJobStore, settings, ids: list[str]) -> None:
    worker = Worker(store, settings, name="test-worker")
    thread = threading.Thread(target=worker.run, name="egress-worker", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not all(store.export_get(None, i).state == "failed" for i in ids):
            assert time.monotonic() < deadline, [store.export_get(None, i) for i in ids]
            time.sleep(0.1)
    finally:
        worker.stopping.set()
        thread.join(30)


def test_failed_exports_show_plain_errors_and_no_secret(
        captured: LogCapture, settings, store: SqlJobStore, tokens: Tokens, pg_url: str,
        tmp_path: Path):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, note text)")
    port = urlsplit(pg_url).port
    assert port is not None
    gone = tmp_path / "gone" / "shop.db"  # a SQLite source removed after the export began
    gone.parent.mkdir()
    make_events_db(gone, {"users": 5})
    s = replace(settings, sources={**settings.sources, "pg": _query_url(pg_url, port),
                                   "gone": f"sqlite:///{gone}"},
                worker=replace(settings.worker, max_attempts=1),
                webhooks=WebhookSettings(allow_http=True, allow_loopback=True))
    with LiveServer(create_app(s, store)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        api = Api(client, tokens["alpha"])
        hook = {"callback_url": "http://127.0.0.1:9/hook"}
        ids = {name: api.create({"source": name, "tables": [table], **hook})["id"]
               for name, table in (("pg", "orders"), ("gone", "users"))}
        # the worker sees the PostgreSQL source on a port nobody listens on
        gone.unlink()
        down = replace(s, sources={**s.sources, "pg": _query_url(pg_url, free_port())})
        _run_worker_until_failed(store, down, list(ids.values()))

        reader = tokens["exports:read"]
        for name, export_id in ids.items():
            public = [
                api.get(f"/v1/exports/{export_id}", token=reader).text,
                api.get("/v1/exports", token=reader).text,
                api.get(f"/v1/exports/{export_id}/events", token=reader).text,
                *(str(d.payload) for d in store.delivery_list("alpha", export_id)),
            ]
            for text in public:
                _no_password(text, f"a public answer about {name}")
                for internal in ("127.0.0.1", f":{port}", str(tmp_path), "postgres",
                                 "shop.db"):
                    assert internal not in text, f"{internal!r} in a public answer: {text}"
            view = api.get(f"/v1/exports/{export_id}", token=reader).json()
            assert view["status"] == "failed" and view["error_detail"] is None
            error = view["error"]
            assert "source" in error and "retry" in error, error
            assert all(error in text for text in public[2:]), "the events and the webhook"
            # an admin token sees the detail, its credentials masked
            detail = api.get(f"/v1/exports/{export_id}").json()["error_detail"]
            _no_password(detail, "the admin's detail")
            assert ("password=***" in detail) if name == "pg" else (str(gone) in detail)
    # a request that reaches the source at once: a generic 503, the detail in the log
    with LiveServer(create_app(down, store)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        api = Api(client, tokens["alpha"])
        for r in (api.post("/v1/exports", json={"source": "pg", "tables": ["orders"]}),
                  api.get("/v1/sources/pg/tables")):
            assert r.status_code == 503, r.text
            _no_password(r.text, "a 503")
            assert "127.0.0.1" not in r.text
    log = "\n".join(captured.lines)
    _no_password(log, "the server log")
    assert "password=***" in log and str(gone) in log  # the detail is in the log


@pytest.mark.parametrize("form", ["query", "userinfo"])
def test_cli_error_shows_no_password(pg_url: str, tmp_path: Path, form: str):
    parts = urlsplit(pg_url)
    url = (_query_url(pg_url, free_port()) if form == "query" else
           f"postgresql://postgres:{PASSWORD}@{parts.hostname}:{free_port()}{parts.path}")
    result = CliRunner().invoke(main, ["export", "--source", url, "--table", "orders",
                                       "--format", "csv", "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output
    _no_password(result.output + result.stderr, "the CLI's error")
    assert result.stderr.startswith("egress: error: ") and "***" in result.stderr


def test_served_manifest_holds_no_server_path(api_worker: Api, tokens: Tokens, settings):
    export_id = api_worker.create({"source": "main", "tables": ["users"]})["id"]
    api_worker.wait(export_id)
    r = api_worker.get(f"/v1/exports/{export_id}/files/manifest.json",
                       token=tokens["exports:read"])
    assert r.status_code == 200
    assert str(settings.home) not in r.text and "/tmp" not in r.text, r.text
    manifest = r.json()
    assert manifest["destination"] == "local" and manifest["source"] == "main"


def test_cli_jobs_show_prints_the_detail(tmp_path: Path, source_db: Path):
    """The CLI is a local admin: ``jobs show`` prints the detail below the plain error."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "egress.toml").write_text(f'[sources.main]\nurl = "sqlite:///{source_db}"\n')
    runner = CliRunner()
    made = runner.invoke(main, ["jobs", "create", "--home", str(home), "--source", "main",
                                "--table", "users", "--json"])
    assert made.exit_code == 0, made.output
    export_id = json.loads(made.stdout)["id"]
    store = SqlJobStore(f"sqlite:///{home / 'egress.db'}")
    try:
        [task] = store.task_claim("w", lease_seconds=30, project_cap=10, limit=1)
        exc = SourceUnavailableError(f"cannot open SQLite database {source_db}: no such file")
        assert store.task_fail(task.id, task.lease_token, describe_failure(exc))
    finally:
        store.close()
    shown = runner.invoke(main, ["jobs", "show", "--home", str(home), export_id])
    assert shown.exit_code == 0, shown.output
    assert "error    table 'users': the source database could not be reached" in shown.stdout
    assert f"detail   table 'users': cannot open SQLite database {source_db}" in shown.stdout
    as_json = runner.invoke(main, ["jobs", "show", "--home", str(home), export_id, "--json"])
    assert json.loads(as_json.stdout)["error_detail"].endswith("no such file")
