"""A Trino source end to end through the commands and the HTTP API: ``egress export
--source trino://…`` (one-shot, in this process), ``egress jobs create --source
trino://…`` with ``egress worker``, and ``POST /v1/exports`` with ``role`` and
``client_tags``; and the password, which no log line shows."""

from __future__ import annotations

import csv
import dataclasses
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from apiharness import LINK_KEY, Api, LiveServer, Tokens, auth
from egress.config import ApiSettings, Settings
from egress.exceptions import ConfigError
from egress.sources.trino_client import TrinoClient, TrinoEndpoint
from egress.store.sql import SqlJobStore
from trino_protocol import QueryPlan, Result, TrinoProtocolServer
from trinoharness import Warehouse, trino_url


def egress(*args: str, home: Path, env: Mapping[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}
    # a worker at its default nice 10 gets a tenth of a core the suite's other groups
    # contend for: 20-50 s of start-up in CI (as tests/jobsharness.py says)
    full.update({"EGRESS_HOME": str(home), "EGRESS_WORKER_METRICS_PORT": "0",
                 "EGRESS_WORKER_NICE": "0", **(env or {})})
    return subprocess.run([sys.executable, "-m", "egress.cli", *args], env=full,
                          capture_output=True, text=True, timeout=120)


def csv_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_egress_export_reads_a_trino_table(tmp_path: Path, trino: TrinoProtocolServer,
                                           warehouse: Warehouse) -> None:
    trino.plan_for(r'"orders"', QueryPlan(queued_polls=2, page_rows=64))
    out = tmp_path / "out"
    done = egress("export", "--source", trino_url(trino), "--table", "orders", "--role",
                  "analyst", "--client-tag", "cli", "--format", "csv", "--out", str(out),
                  "--progress", "none", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    got = csv_rows(out / "orders.csv")
    assert got[0] == ["id", "name", "price", "at"]
    assert got[1:] == [[str(r[0]), r[1], r[2], r[3]] for r in warehouse.tables["orders"].rows]
    post = next(r for r in trino.requests if r.method == "POST" and '"orders"' in r.body)
    assert post.headers["X-Trino-Role"] == "system=ROLE%7Banalyst%7D"
    assert post.headers["X-Trino-Client-Tags"] == "egress-export,cli"


def test_egress_export_without_a_role_says_so(tmp_path: Path, trino: TrinoProtocolServer,
                                              warehouse: Warehouse) -> None:
    done = egress("export", "--source", trino_url(trino), "--table", "orders", "--format",
                  "csv", "--out", str(tmp_path / "out"), home=tmp_path / "home")
    assert done.returncode != 0
    assert "missing role:" in done.stderr
    assert not [r for r in trino.requests if r.method == "POST"]
    assert not (tmp_path / "out").exists()  # nothing left behind


def test_egress_export_of_a_query_orders_it_by_the_key(
        tmp_path: Path, trino: TrinoProtocolServer, warehouse: Warehouse) -> None:
    def answer(sql: str, headers: Mapping[str, str]) -> Result:
        rows = [] if "LIMIT 0" in sql else [[3, "c"], [1, "a"], [2, "b"]]
        if 'ORDER BY "id"' in sql:
            rows.sort()
        return Result(columns=[("id", "integer"), ("label", "varchar")], rows=rows)

    trino.respond(r"AS egress_query", answer)
    out = tmp_path / "out"
    done = egress("export", "--source", trino_url(trino), "--query",
                  "SELECT id, label FROM orders", "--key", "id", "--name", "labels",
                  "--role", "analyst", "--format", "jsonl", "--out", str(out),
                  "--progress", "none", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert (out / "labels.jsonl").read_text().splitlines() == [
        '{"id":1,"label":"a"}', '{"id":2,"label":"b"}', '{"id":3,"label":"c"}']


def test_jobs_create_and_a_worker(tmp_path: Path, trino: TrinoProtocolServer,
                                  warehouse: Warehouse) -> None:
    home = tmp_path / "home"
    created = egress("jobs", "create", "--source", trino_url(trino), "--table", "items",
                     "--role", "analyst", "--format", "csv", home=home)
    assert created.returncode == 0, created.stderr
    export_id = created.stdout.strip()
    ran = egress("worker", "--exit-when-idle", home=home)
    assert ran.returncode == 0, ran.stderr
    shown = egress("jobs", "show", export_id, home=home)
    assert "completed" in shown.stdout, shown.stdout + shown.stderr
    assert "query 20" in shown.stdout  # the engine's query id (Trino's: 2026…_…)
    files = list((home / "exports").rglob("items.csv"))
    assert len(files) == 1 and len(csv_rows(files[0])) == 41


def test_the_api_takes_role_and_client_tags(tmp_path: Path, settings: Settings,
                                            store: SqlJobStore, trino: TrinoProtocolServer,
                                            warehouse: Warehouse) -> None:
    from egress.web import create_site

    s = dataclasses.replace(settings, api=ApiSettings(link_signing_key=LINK_KEY),
                            allow_source_urls=False)
    tokens = Tokens(store)
    tokens.make("alpha", "exports:read", "exports:create", label="create")
    tokens.make("alpha", "admin", label="admin")
    with LiveServer(create_site(s, store, run_worker=True)) as server:
        import httpx

        with httpx.Client(base_url=server.url, timeout=30) as client:
            api = Api(client, tokens["admin"], None)
            body = {"source": "wh", "tables": ["items"], "format": "csv", "role": "analyst",
                    "client_tags": ["api", "team-b"]}
            r = client.post("/v1/exports", json=body, headers=auth(tokens["create"]))
            assert r.status_code == 202, r.text
            done = api.wait(r.json()["id"], "completed", timeout=60)
            assert done["status"] == "completed"
            shown = client.get(f"/v1/exports/{done['id']}", headers=auth(tokens["admin"]))
            assert shown.json()["tables"][0]["query_id"] in trino.queries
            post = next(r for r in trino.requests if r.method == "POST" and '"items"' in r.body)
            assert post.headers["X-Trino-Client-Tags"] == "egress-export,api,team-b"
            # a query needs exports:query, on a remote engine as anywhere
            query = {"source": "wh", "query": "SELECT 1 AS id", "key": ["id"],
                     "role": "analyst"}
            r = client.post("/v1/exports", json=query, headers=auth(tokens["create"]))
            assert r.status_code == 403 and "exports:query" in r.text
            bad = dict(body, client_tags=["a,b"])
            r = client.post("/v1/exports", json=bad, headers=auth(tokens["create"]))
            assert r.status_code in (400, 422) and "client_tags" in r.text


def test_the_password_is_sent_as_basic_auth_over_tls_only_and_never_logged(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="only over TLS"):
        TrinoEndpoint.parse("trino://alice:s3cret-pw@127.0.0.1:8080/memory/default")
    monkeypatch.setenv("EGRESS_TRINO_PASSWORD", "env-s3cret-pw")
    endpoint = TrinoEndpoint.parse("trino+https://alice@127.0.0.1:1/memory/default")
    assert endpoint.password == "env-s3cret-pw" and endpoint.base_url.startswith("https://")
    assert "env-s3cret-pw" not in repr(endpoint)
    caplog.set_level(logging.DEBUG)
    with TrinoClient(endpoint, retries=0) as client, pytest.raises(Exception) as failed:
        client.submit("SELECT 1", role="analyst")  # nothing listens on port 1
    assert "env-s3cret-pw" not in str(failed.value)
    assert "env-s3cret-pw" not in caplog.text


def test_a_sources_password_setting_reaches_the_url_and_stays_masked(tmp_path: Path) -> None:
    from egress.config import load_settings
    from egress.redact import redact_url

    home = tmp_path / "home"
    home.mkdir()
    (home / "egress.toml").write_text(
        '[sources.wh]\nurl = "trino+https://etl@trino.example:443/hive/sales"\n'
        'password = "p@ss/word"\n')
    url = load_settings(home, env={}).source_url("wh")
    endpoint = TrinoEndpoint.parse(url)
    assert endpoint.password == "p@ss/word" and endpoint.user == "etl"
    assert endpoint.catalog == "hive" and endpoint.schema == "sales"
    assert "p@ss" not in redact_url(url) and "word" not in redact_url(url)
