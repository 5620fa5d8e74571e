"""A job whose output would take the manifest's name (a query export named ``manifest``
in JSON) is renamed with a hash suffix when the worker plans it: both are served."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from apiharness import Api


def test_a_job_query_named_manifest_keeps_its_data(api_worker: Api, source_db: Path):
    body = {"source": "main", "query": "SELECT id, kind FROM events", "key": ["id"],
            "name": "manifest", "format": "json"}
    view = api_worker.wait(api_worker.create(body)["id"])
    assert view["status"] == "completed", view
    with sqlite3.connect(source_db) as conn:
        rows = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    [f] = view["files"]
    assert f["name"] != "manifest.json" and f["name"].startswith("manifest-")
    data = api_worker.get(f["download_url"])
    assert data.status_code == 200 and len(data.json()) == rows
    manifest = api_worker.get(f"/v1/exports/{view['id']}/files/manifest.json").json()
    assert [m["name"] for m in manifest["files"]] == [f["name"]]
    assert manifest["tables"][0]["table"] == "manifest"
