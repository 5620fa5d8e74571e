"""Trino exports as jobs, against the protocol server: submitted once, polled from the
job store, streamed with egress's formats or unloaded by the engine."""

from __future__ import annotations

import csv
import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from egress.config import Settings
from egress.domain.jobs import ExportState, TaskState
from egress.manager import ExportRequest, cancel_export, create_export, export_root
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from egress.worker.runner import TaskRunner
from jobsharness import wait_until
from trino_protocol import EngineError, QueryPlan, TrinoProtocolServer
from trinoharness import SCALE, Warehouse, rows


def create(store: SqlJobStore, settings: Settings, *tables: str, **options: Any) -> str:
    opts = {"role": "analyst", **options}
    opts = {k: v for k, v in opts.items() if v is not None}
    fmt = "parquet" if opts.get("mode") == "unload" else "csv"
    export, _ = create_export(store, settings, ExportRequest(
        source="wh", tables=tables, format=fmt, options=opts), project="p")
    return export.id


def run_worker(store: SqlJobStore, settings: Settings, seconds: float = 60.0,
               concurrency: int = 2) -> None:
    worker = Worker(store, settings, concurrency=concurrency)
    thread = threading.Thread(target=worker.run, kwargs={"exit_when_idle": True}, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        worker.stopping.set()
        thread.join(30)
        pytest.fail(f"the worker did not finish within {seconds} s")


def read_csv(settings: Settings, store: SqlJobStore, export_id: str, table: str) -> list[list[str]]:
    export = store.export_get("p", export_id)
    assert export is not None
    root = export_root(settings, export)
    got: list[list[str]] = []
    for path in sorted(root.glob(f"{table}*.csv")):
        with path.open(newline="") as f:
            got.extend(list(csv.reader(f))[1:])
    return got


def expected(data: list[list[Any]]) -> list[list[str]]:
    return [[str(r[0]), r[1], r[2], r[3]] for r in data]


def statements(server: TrinoProtocolServer, needle: str) -> list[Any]:
    return [r for r in server.requests
            if r.method == "POST" and needle in r.body]


def test_direct_export_is_submitted_once_polled_and_streamed_with_the_headers(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    trino.plan_for(r'FROM "memory"\."default"\."orders"', QueryPlan(queued_polls=3, page_rows=40))
    export_id = create(store, settings, "orders", client_tags=["team-a", "nightly"])
    run_worker(store, settings)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is ExportState.COMPLETED, export.error
    want = expected(warehouse.tables["orders"].rows)
    assert read_csv(settings, store, export_id, "orders") == want
    posts = statements(trino, '"orders"')
    assert len(posts) == 1  # submitted once
    headers = {k.lower(): v for k, v in posts[0].headers.items()}
    assert headers["x-trino-user"] == "alice"
    assert headers["x-trino-source"] == "egress"
    assert headers["x-trino-client-tags"] == "egress-export,team-a,nightly"
    assert headers["x-trino-role"] == "system=ROLE%7Banalyst%7D"
    assert headers["x-trino-catalog"] == "memory"
    assert headers["x-trino-schema"] == "default"
    assert "authorization" not in headers  # no password over plain HTTP
    [task] = store.task_list(export_id)
    assert task.query_id is not None and task.poll_count >= 3
    manifest = export.manifest or {}
    [table] = manifest["tables"]
    assert table["rows"] == 250 and table["key_columns"] == [] and table["key_range"] is None
    assert all(f["first_key"] is None for f in manifest["files"])  # no next URIs leak


def test_poll_delays_follow_the_stored_fibonacci_sequence(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    trino.plan_for(r'FROM "memory"\."default"\."items"', QueryPlan(queued_polls=12))
    export_id = create(store, settings, "items")
    runner = TaskRunner(store, settings, threading.Event())
    [claimed] = store.task_claim("w", lease_seconds=10, project_cap=4)
    assert runner.run(claimed) == "submitted"
    delays = []
    for _ in range(11):
        task = store.task_list(export_id)[0]
        assert task.state is TaskState.SUBMITTED and task.lease_token is None  # no lease
        assert task.next_poll_at is not None and task.polled_at is not None
        delays.append(round((task.next_poll_at - task.polled_at) / SCALE, 3))
        deadline = time.monotonic() + 10
        while runner.remote.poll_pass() == 0:
            assert time.monotonic() < deadline
            time.sleep(0.003)
        # polled when due, not before (both times from the store's clock)
        assert store.task_list(export_id)[0].polled_at >= task.next_poll_at  # type: ignore[operator]
    assert delays == [2, 3, 5, 8, 13, 21, 34, 55, 89, 90, 90]
    assert store.task_list(export_id)[0].poll_count == 11


def test_a_missing_role_fails_at_once_and_the_worker_goes_on(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    no_role = create(store, settings, "items", role=None)
    with_role = create(store, settings, "items")
    run_worker(store, settings, concurrency=1)
    failed = store.export_get("p", no_role)
    assert failed is not None and failed.state is ExportState.FAILED
    assert "missing role:" in (failed.error or "")
    assert store.task_list(no_role)[0].attempts == 1  # not retried
    done = store.export_get("p", with_role)
    assert done is not None and done.state is ExportState.COMPLETED
    assert len(statements(trino, '"items"')) == 1  # the role-less one never reached it


@pytest.mark.parametrize(("timeouts", "outcome"), [(2, ExportState.COMPLETED),
                                                   (3, ExportState.FAILED)])
def test_a_cold_start_timeout_is_retried_exactly_twice(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer, timeouts: int, outcome: ExportState) -> None:
    quick = dataclasses.replace(settings, remote=dataclasses.replace(
        settings.remote, first_call_timeout=0.3, first_call_wait=0.05))
    export_id = create(store, quick, "items")
    trino.post_delay(timeouts, 1.0)
    run_worker(store, quick)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is outcome, export.error
    assert len(statements(trino, '"items"')) == 3  # the first call and two retries
    if outcome is ExportState.FAILED:
        assert "did not answer the first call" in (export.error or "")


def test_an_engine_failure_carries_the_engines_message(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    trino.plan_for(r'"orders"', QueryPlan(queued_polls=1, page_rows=50, fail_after_pages=2,
                                          error=EngineError("Query exceeded per-node memory limit",
                                                            "EXCEEDED_LOCAL_MEMORY_LIMIT",
                                                            "INSUFFICIENT_RESOURCES", 131079)))
    trino.plan_for(r'"items"', QueryPlan(queued_polls=1000))  # still queued when it fails
    export_id = create(store, settings, "orders", "items")
    run_worker(store, settings)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is ExportState.FAILED
    assert "EXCEEDED_LOCAL_MEMORY_LIMIT" in (export.error or "")
    assert "Query exceeded per-node memory limit" in (export.error or "")
    # the other table's query is stopped on the engine by the next poll pass
    remote = TaskRunner(store, settings, threading.Event()).remote
    deadline = time.monotonic() + 10
    while (items := next(t for t in store.task_list(export_id) if t.table == "items")
           ).state is TaskState.SUBMITTED:
        remote.poll_pass()
        assert time.monotonic() < deadline
    assert items.state is TaskState.CANCELLED
    assert items.query_id in trino.deleted


def test_failed_before_streaming(store: SqlJobStore, settings: Settings, warehouse: Warehouse,
                                 trino: TrinoProtocolServer) -> None:
    trino.plan_for(r'"items"', QueryPlan(queued_polls=2, fail_after_pages=0,
                                         error=EngineError("Access Denied: Cannot select from "
                                                           "table items", "PERMISSION_DENIED",
                                                           "USER_ERROR", 4)))
    export_id = create(store, settings, "items")
    run_worker(store, settings)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is ExportState.FAILED
    assert "PERMISSION_DENIED" in (export.error or "")
    assert "Access Denied: Cannot select from table items" in (export.error or "")


def test_cancel_sends_delete_to_the_engine(store: SqlJobStore, settings: Settings,
                                          warehouse: Warehouse,
                                          trino: TrinoProtocolServer) -> None:
    trino.plan_for(r'"items"', QueryPlan(queued_polls=10_000))
    export_id = create(store, settings, "items")
    runner = TaskRunner(store, settings, threading.Event())
    [claimed] = store.task_claim("w", lease_seconds=10, project_cap=4)
    assert runner.run(claimed) == "submitted"
    cancel_export(store, "p", export_id)
    deadline = time.monotonic() + 10
    while store.task_list(export_id)[0].state is not TaskState.CANCELLED:
        runner.remote.poll_pass()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    [task] = store.task_list(export_id)
    assert task.query_id in trino.deleted
    assert any(r.method == "DELETE" for r in trino.requests)


def test_sixty_submitted_tasks_are_kept_moving_by_one_worker(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    for i in range(60):
        warehouse.add(f"t{i:02d}", rows(5, start=i * 10))
    trino.plan_for(r'"t\d\d"', QueryPlan(queued_polls=4))
    ids = [create(store, settings, f"t{i:02d}") for i in range(60)]
    run_worker(store, settings, seconds=120, concurrency=2)
    states = {store.export_get("p", i).state for i in ids}  # type: ignore[union-attr]
    assert states == {ExportState.COMPLETED}
    # every query waited in the queue and was polled there, with 2 slots for 60 queries
    assert all(t.poll_count >= 4 for i in ids for t in store.task_list(i))


def test_503_bursts_are_retried(store: SqlJobStore, settings: Settings, warehouse: Warehouse,
                                trino: TrinoProtocolServer) -> None:
    trino.plan_for(r'"items"', QueryPlan(queued_polls=2, page_rows=7))
    export_id = create(store, settings, "items")
    trino.fail_next(4, 503)
    run_worker(store, settings)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is ExportState.COMPLETED, export.error
    assert read_csv(settings, store, export_id, "items") == expected(warehouse.tables["items"].rows)
    assert sum(1 for r in trino.requests if r.status == 503) == 4


def test_an_expired_next_uri_is_looked_up_and_submitted_again(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    trino.plan_for(r'"items"', QueryPlan(queued_polls=3, page_rows=10))
    export_id = create(store, settings, "items")
    runner = TaskRunner(store, settings, threading.Event())
    [claimed] = store.task_claim("w", lease_seconds=10, project_cap=4)
    assert runner.run(claimed) == "submitted"
    first = store.task_list(export_id)[0].query_id
    assert first is not None
    trino.expire(first)
    run_worker(store, settings)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is ExportState.COMPLETED, export.error
    [task] = store.task_list(export_id)
    assert task.query_id != first
    assert "submitted again" in (task.remote_note or "")
    assert any(r.method == "GET" and r.path == f"/v1/query/{first}" for r in trino.requests)
    assert read_csv(settings, store, export_id, "items") == expected(warehouse.tables["items"].rows)


def test_unload_writes_parquet_by_the_engine_and_counts_rows_from_footers(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    trino.plan_for(r"system\.unload", QueryPlan(queued_polls=2))
    export_id = create(store, settings, "orders", mode="unload")
    run_worker(store, settings)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is ExportState.COMPLETED, export.error
    manifest = export.manifest or {}
    files = manifest["files"]
    assert [f["name"] for f in files] == ["orders/part-00000.parquet", "orders/part-00001.parquet"]
    root = export_root(settings, export)
    assert sum(f["rows"] for f in files) == 250 == manifest["tables"][0]["rows"]
    for f in files:
        assert f["bytes"] == (root / f["name"]).stat().st_size
        assert f["rows"] == pq.ParquetFile(root / f["name"]).metadata.num_rows
    unload = statements(trino, "system.unload")
    assert len(unload) == 1 and "input => TABLE(SELECT * FROM" in unload[0].body
    assert (root / "manifest.json").exists() and (root / "_SUCCESS").exists()
    assert json.loads((root / "manifest.json").read_text())["files"] == files


def test_unload_falls_back_to_direct_when_the_engine_lacks_it(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    warehouse.unload_available = False
    export_id = create(store, settings, "items", mode="unload")
    run_worker(store, settings)
    export = store.export_get("p", export_id)
    assert export is not None and export.state is ExportState.COMPLETED, export.error
    [task] = store.task_list(export_id)
    assert task.remote_mode == "direct"
    assert "system.unload is not available" in (task.remote_note or "")
    root = export_root(settings, export)
    ids = pq.read_table(root / "items").column("id").to_pylist()
    assert ids == [r[0] for r in warehouse.tables["items"].rows]


def test_role_and_tags_are_for_remote_engines_only(store: SqlJobStore, settings: Settings,
                                                   tmp_path: Path) -> None:
    from egress.exceptions import ConfigError
    db = tmp_path / "x.db"
    import sqlite3

    sqlite3.connect(db).execute("CREATE TABLE t (id INTEGER PRIMARY KEY)").connection.commit()
    with pytest.raises(ConfigError, match="apply to remote engines"):
        create_export(store, settings, ExportRequest(
            source=f"sqlite:///{db}", tables=("t",), options={"role": "analyst"}))
    with pytest.raises(ConfigError, match="client_tags must be"):
        create_export(store, settings, ExportRequest(
            source="wh", tables=("items",), options={"role": "a", "client_tags": ["a,b"]}))


def test_data_pages_of_many_sizes_come_out_whole(store: SqlJobStore, settings: Settings,
                                                 warehouse: Warehouse,
                                                 trino: TrinoProtocolServer) -> None:
    warehouse.add("big", rows(3001))
    trino.plan_for(r'"big"', QueryPlan(queued_polls=1, running_polls=2, page_rows=333))
    export, _ = create_export(store, settings, ExportRequest(
        source="wh", tables=("big",), format="csv",
        options={"role": "analyst", "part_rows": 500, "max_file_size": 40_000}), project="p")
    run_worker(store, settings)
    done = store.export_get("p", export.id)
    assert done is not None and done.state is ExportState.COMPLETED, done.error
    assert read_csv(settings, store, export.id, "big") == expected(warehouse.tables["big"].rows)
    assert len((done.manifest or {})["files"]) > 1  # files cut by size, as for any source


def test_slices_continue_the_stream_where_the_last_committed_part_ended(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    warehouse.add("big", rows(2000))
    trino.plan_for(r'"big"', QueryPlan(page_rows=100, page_delay=0.03))
    short = dataclasses.replace(settings, worker=dataclasses.replace(
        settings.worker, slice_seconds=0.2))
    export, _ = create_export(store, short, ExportRequest(
        source="wh", tables=("big",), format="csv",
        options={"role": "analyst", "part_rows": 150}), project="p")
    run_worker(store, short, concurrency=1)
    done = store.export_get("p", export.id)
    assert done is not None and done.state is ExportState.COMPLETED, done.error
    assert read_csv(short, store, export.id, "big") == expected(warehouse.tables["big"].rows)
    [task] = store.task_list(export.id)
    claims = [e for e in store.lease_events(task.id) if e.kind == "claim"]
    assert len(claims) >= 4  # submit, then several slices of the stream
    assert task.remote_note is None  # each slice went on from the engine's last page
    assert len([r for r in trino.requests if r.method == "POST"]) == 3  # 2 catalog + 1
    assert all(r.status != 410 for r in trino.requests)


def test_the_reconciler_resets_a_claim_never_submitted_but_never_a_submitted_task(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    from egress.metrics import STALE_CLAIMS_RESET
    from egress.worker.reconciler import reconcile_once

    quick = dataclasses.replace(settings, remote=dataclasses.replace(
        # 6 s: the claims, a submit and a reconcile pass come first (a loaded CI machine
        # once took more than the 0.3 s this was, and the "not yet" check failed)
        settings.remote, claimed_reset_seconds=6.0, unpolled_lookup_seconds=3600))
    trino.plan_for(r'"items"', QueryPlan(queued_polls=10_000))
    stuck_id = create(store, quick, "orders")
    polled_id = create(store, quick, "items")
    claimed_at = time.monotonic()
    [stuck] = store.task_claim("stuck-worker", lease_seconds=3600, project_cap=4, limit=1)
    assert stuck.export_id == stuck_id  # claimed, and its worker never submits it
    runner = TaskRunner(store, quick, threading.Event())
    [submitting] = store.task_claim("w", lease_seconds=3600, project_cap=4, limit=1)
    assert runner.run(submitting) == "submitted"
    before = STALE_CLAIMS_RESET._value.get()
    rescued = [reconcile_once(store, quick).rescued]
    if time.monotonic() - claimed_at < 5.0:  # (a machine stalled for seconds may pass it)
        assert rescued == [0]  # not yet 6 s
    time.sleep(6.0)
    assert wait_until(lambda: rescued.append(reconcile_once(store, quick).rescued)
                      or sum(rescued) == 1, 30, every=0.2)
    assert STALE_CLAIMS_RESET._value.get() == before + 1
    assert store.task_list(stuck_id)[0].state is TaskState.QUEUED
    assert store.task_list(polled_id)[0].state is TaskState.SUBMITTED  # left alone


def test_a_submitted_task_nobody_polled_is_looked_up_by_its_query_id(
        store: SqlJobStore, settings: Settings, warehouse: Warehouse,
        trino: TrinoProtocolServer) -> None:
    from egress.worker.reconciler import reconcile_once

    # nobody polls (no poll pass runs) for longer than the lookup bound
    quick = dataclasses.replace(settings, remote=dataclasses.replace(
        settings.remote, unpolled_lookup_seconds=0.2, poll_delays=(3600.0,)))
    trino.plan_for(r'"items"', QueryPlan(queued_polls=10_000))
    export_id = create(store, quick, "items")
    runner = TaskRunner(store, quick, threading.Event())
    [claimed] = store.task_claim("w", lease_seconds=60, project_cap=4)
    assert runner.run(claimed) == "submitted"
    query_id = store.task_list(export_id)[0].query_id
    assert query_id is not None
    trino.expire(query_id)  # its next URI is gone (the engine dropped the client)
    time.sleep(0.3)
    reconcile_once(store, quick)
    [task] = store.task_list(export_id)
    assert task.state is TaskState.QUEUED and task.query_id is None  # to be submitted again
    assert "submitted again" in (task.remote_note or "")
    assert any(r.path == f"/v1/query/{query_id}" and r.method == "GET" for r in trino.requests)
    assert query_id in trino.deleted  # the old query was stopped
