"""A cancelled export whose outputs are removed lists no file and no table as ``done``:
what the API, ``jobs show`` (``export_view``) and the live events list exists.
A task is run to done for real (the runner, a real sink), then the export is cancelled
and the reconciler removes its folder (SQLite and PostgreSQL stores)."""

from __future__ import annotations

import json
import threading
from typing import Any

from apiharness import Api, auth
from egress.config import Settings
from egress.export_view import export_view
from egress.manager import export_root
from egress.store.sql import SqlJobStore
from egress.worker.reconciler import reconcile_once
from egress.worker.runner import TaskRunner


def _first_event(api: Api, url: str) -> dict[str, Any]:
    with api.client.stream("GET", url, headers=auth(api.token)) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                return dict(json.loads(line.removeprefix("data:")))
    raise AssertionError("no event")


def _run_one_task_to_done(store: SqlJobStore, settings: Settings) -> str:
    runner = TaskRunner(store, settings, threading.Event())
    [task] = store.task_claim("test", lease_seconds=30, project_cap=10, limit=1)
    while runner.run(task) != "done":
        [task] = [t for t in store.task_claim("test", lease_seconds=30, project_cap=10,
                                              limit=10) if t.id == task.id]
    return task.table


def _check_listing(api: Api, store: SqlJobStore, settings: Settings, export_id: str) -> None:
    export = store.export_get("alpha", export_id)
    assert export is not None
    root = export_root(settings, export)
    shown = api.get(f"/v1/exports/{export_id}").json()
    views = {"api": shown, "jobs show": export_view(store, export, settings).to_json(),
             "events": _first_event(api, shown["events_url"])}
    for where, view in views.items():
        assert view["status"] == "cancelled", where
        assert [t["status"] for t in view["tables"]] == ["cancelled", "cancelled"], where
        for f in view.get("files", []):  # the events list no files
            assert (root / f["name"]).is_file(), (where, f)
    assert shown["files"] == [] and views["jobs show"]["files"] == []


def test_a_cancelled_export_lists_what_exists(api: Api, store: SqlJobStore, settings: Settings):
    export_id = api.create({"source": "main", "tables": ["users", "events"],
                            "format": "csv"})["id"]
    done = _run_one_task_to_done(store, settings)
    root = export_root(settings, store.export_get("alpha", export_id))
    assert (root / f"{done}.csv").is_file()
    assert api.post(f"/v1/exports/{export_id}/cancel").json()["status"] == "cancelled"
    _check_listing(api, store, settings, export_id)  # being removed: listed no more
    assert reconcile_once(store, settings).cleaned == 1
    assert not root.exists()
    _check_listing(api, store, settings, export_id)  # removed
    # the removed file is not offered for download either
    r = api.get(f"/v1/exports/{export_id}/files/{done}.csv")
    assert r.status_code == 404, r.text
