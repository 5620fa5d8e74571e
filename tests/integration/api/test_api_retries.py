"""While an export keeps going through failures, its status says so in plain words: which
tables were retried, how often, and the last error (issue 18)."""

from __future__ import annotations

from click.testing import CliRunner

from apiharness import Api
from egress.cli import main
from egress.config import Settings
from egress.store.sql import SqlJobStore


def test_a_retried_export_shows_how_often_and_why(api: Api, store: SqlJobStore,
                                                  settings: Settings) -> None:
    export_id = api.create({"source": "main", "tables": ["events"]})["id"]
    [task] = store.task_claim("w", lease_seconds=5, project_cap=10, limit=1)
    for _ in range(2):
        assert store.task_requeue(task.id, task.lease_token, error="SourceUnavailableError: "
                                  "cannot reach the database", count_attempt=True)
        [task] = store.task_claim("w", lease_seconds=5, project_cap=10, limit=1)
    view = api.get(f"/v1/exports/{export_id}").json()
    assert view["status"] == "running" and view["failures"] == 2
    events = next(t for t in view["tables"] if t["table"] == task.table)
    assert (events["attempts"], events["failures"]) == (2, 2)
    assert view["notice"] == (
        f"still running: table {task.table!r} was retried 2 times; last error: "
        "SourceUnavailableError: cannot reach the database")
    listed = api.get("/v1/exports").json()["items"][0]
    assert listed["notice"] == view["notice"]
    shown = CliRunner().invoke(main, ["jobs", "show", "--home", str(settings.home),
                                      "--project", "alpha", export_id],
                               env={"EGRESS_STORE_URL": settings.store_url})
    assert f"note     {view['notice']}" in shown.stdout
    # once it ended, there is nothing to note
    assert store.task_fail(task.id, task.lease_token, "for good")
    assert api.get(f"/v1/exports/{export_id}").json()["notice"] is None
