"""Conformance: progress of many exports in one read (what the live-events hub polls)."""

from __future__ import annotations

import sqlalchemy as sa

from egress.domain.jobs import ExportState, TaskState
from egress.store.sql import SqlJobStore


def test_progress_of_many_exports_in_one_read(store: SqlJobStore, make_export):
    a, _ = make_export("p", ("t1", "t2"))
    b, _ = make_export("q", ("u",))
    idle, _ = make_export("p", ("v",))
    [task] = store.task_claim("w1", lease_seconds=30, project_cap=10, limit=1)
    assert task.export_id == a.id and task.table == "t1"
    assert store.task_commit(task.id, task.lease_token, checkpoint={"rows": 100}, rows=100,
                             bytes=4096)

    found = store.export_progress_many([a.id, b.id, "exp_missing", a.id])
    assert set(found) == {a.id, b.id}  # unknown ids are left out; duplicates are one
    pa, pb = found[a.id], found[b.id]
    assert (pa.project, pa.state, pb.project, pb.state) == (
        "p", ExportState.RUNNING, "q", ExportState.QUEUED)
    assert [(t.table, t.seq, t.state, t.rows, t.bytes, t.rows_estimate) for t in pa.tasks] == [
        ("t1", 0, TaskState.RUNNING, 100, 4096, 1000),
        ("t2", 1, TaskState.QUEUED, 0, 0, 1000),
    ]
    assert (pa.rows, pa.bytes, pb.rows) == (100, 4096, 0)
    assert pa.started_at is not None and pa.finished_at is None and pb.started_at is None
    # The version is the latest change of the export or its tasks: here the commit.
    assert pa.version == store.task_get(task.id).updated_at > pa.created_at
    assert idle.id not in found and store.export_progress_many([]) == {}


def test_progress_version_grows_and_terminal_state_shows(store: SqlJobStore, make_export):
    export, _ = make_export("p", ("t1",))
    before = store.export_progress_many([export.id])[export.id]
    [task] = store.task_claim("w1", lease_seconds=30, project_cap=10)
    assert store.task_commit(task.id, task.lease_token, checkpoint={}, rows=7, bytes=70)
    mid = store.export_progress_many([export.id])[export.id]
    assert mid.version > before.version and mid.rows == 7
    assert store.task_fail(task.id, task.lease_token, "boom: permission denied")
    after = store.export_progress_many([export.id])[export.id]
    assert after.state is ExportState.FAILED
    assert after.error == "table 't1': boom: permission denied"
    assert after.tasks[0].state is TaskState.FAILED
    assert after.tasks[0].error == "boom: permission denied"
    assert after.finished_at is not None and after.version >= mid.version


def test_progress_of_an_export_without_tasks(store: SqlJobStore, export_request):
    export, _ = export_request("p", ())
    record, _ = store.export_create(export, [])
    found = store.export_progress_many([record.id])[record.id]
    assert found.tasks == () and found.rows == 0 and found.version == record.created_at


def test_progress_is_one_statement_however_many_exports(store: SqlJobStore, make_export):
    ids = [make_export("p", ("a", "b"))[0].id for _ in range(30)]
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", count)
    try:
        found = store.export_progress_many(ids)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", count)
    assert len(found) == 30 and all(len(p.tasks) == 2 for p in found.values())
    assert len(statements) == 1
