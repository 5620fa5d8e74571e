"""A full run through the API with every log record captured at DEBUG: no token, source
password, link-signing key, signed link or presigned-URL signature appears in the logs
(nor in any API response but the one meant to carry it)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest

from apiharness import LINK_KEY, Api, LiveServer, Tokens
from egress.api.app import create_app
from egress.store.sql import SqlJobStore
from logcapture import LogCapture, capturing_logs

PASSWORD = "Pa55-w0rd-that-must-never-be-logged"


@pytest.fixture
def captured() -> Iterator[LogCapture]:
    with capturing_logs(threading.get_ident()) as handler:
        yield handler


@pytest.fixture
def pg_source(pg_url: str) -> str:
    """A PostgreSQL source whose URL carries a password (the test server trusts anyone,
    so any password connects)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, note text)")
        conn.execute("INSERT INTO orders SELECT i, 'order ' || i FROM generate_series(1, 3000) i")
    parts = urlsplit(pg_url)
    return parts._replace(netloc=f"postgres:{PASSWORD}@{parts.hostname}:{parts.port}").geturl()


def test_no_secret_in_the_logs_of_a_full_run(captured: LogCapture, settings, store: SqlJobStore,
                                             tokens: Tokens, s3, pg_source: str):
    lake = {"type": "s3", "bucket": s3.name, "prefix": "egress", "min_part_bytes": 1024}
    s = replace(settings, sources={**settings.sources, "pg": pg_source},
                destinations={**settings.destinations, "lake": lake})
    token = tokens["alpha"]
    secrets = {"token": token, "password": PASSWORD, "link key": LINK_KEY}
    with LiveServer(create_app(s, store, run_worker=True)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        api = Api(client, token)
        ids = [
            api.create({"source": "pg", "tables": ["orders"], "destination": "lake",
                        "format": "jsonl", "compression": "gzip"})["id"],
            api.create({"source": "main", "tables": ["users"], "format": "csv"})["id"],
        ]
        views = [api.wait(export_id) for export_id in ids]
        for view in views:
            name = view["files"][0]["name"]
            download = api.get(f"/v1/exports/{view['id']}/files/{name}")
            link = api.post(f"/v1/exports/{view['id']}/links", json={"file": name}).json()
            followed = client.get(link["url"])
            assert followed.status_code in (200, 302)
            secrets[f"link {view['id']}"] = link["url"].rsplit("/", 1)[1]
            for response in (download, followed):
                if response.status_code == 302:
                    query = parse_qs(urlsplit(response.headers["location"]).query)
                    secrets[f"presigned {len(secrets)}"] = query["X-Amz-Signature"][0]
        # every answer an API caller can get about the run
        answers = [client.get(path, headers={"Authorization": f"Bearer {token}"}).text
                   for path in ("/v1/sources", "/v1/sources/pg/tables", "/v1/exports",
                                *(f"/v1/exports/{i}" for i in ids))]
        api.post("/v1/exports", json={"source": "pg", "tables": ["nope"]})  # an error, logged
    assert any("presigned" in k for k in secrets) and sum("link" in k for k in secrets) == 3
    text = "\n".join(captured.lines)
    assert "request" in text and "worker started" in text  # the capture saw the server
    assert "botocore.endpoint" in text and "botocore.auth" in text  # and the S3 client's
    # request signatures of the worker's uploads are redacted as well
    assert not re.search(r"Signature=[0-9a-f]{16}", text)
    for what, secret in secrets.items():
        # which loggers leaked it (the start of their lines: time, level, logger)
        leaks = [line[:80] for line in captured.lines if secret in line]
        assert secret not in text, f"{what} found in the logs: {leaks}"
    for answer in answers:
        for what in ("token", "password", "link key"):
            assert secrets[what] not in answer, f"{what} in an API answer"
    assert str(pg_source) not in "\n".join(answers)
