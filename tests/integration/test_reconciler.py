"""The reconciler's own branches, on both stores: an export past its maximum duration is
failed (its queued tasks cancelled), and an export whose tasks are all done but which no
one finalized (its worker died right after the last task) is completed — manifest and
``_SUCCESS`` written — by whichever worker reconciles next."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from egress.config import Settings
from egress.domain.jobs import ExportState, TaskState
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from egress.worker import finalize as finalize_module
from egress.worker import runner as runner_module
from egress.worker.reconciler import reconcile_once
from egress.worker.runner import TaskRunner
from jobsharness import make_events_db, wait_until, write_home


@pytest.fixture
def settings(tmp_path: Path, store_url: str) -> Settings:
    source = make_events_db(tmp_path / "source.db", {"events": 500, "users": 50})
    return write_home(tmp_path / "home", store_url=store_url, sources={"main": source},
                      worker={"slice_seconds": 5.0, "lease_seconds": 10.0})


@pytest.fixture
def store(settings: Settings):
    s = SqlJobStore(settings.store_url)
    s.migrate()
    yield s
    s.close()


def run_every_task(store: SqlJobStore, settings: Settings) -> None:
    """One worker's runner takes the tasks one at a time until none is left."""
    runner = TaskRunner(store, settings, threading.Event())
    for _ in range(20):
        claimed = store.task_claim("w1", lease_seconds=10, project_cap=10, limit=1)
        if not claimed:
            break
        assert runner.run(claimed[0]) in ("done", "requeued")


def test_an_overdue_export_is_failed_with_its_queued_tasks(settings: Settings,
                                                            store: SqlJobStore) -> None:
    # seconds, not tenths: a loaded CI machine can take one between two calls
    quick = dataclasses.replace(settings, export=dataclasses.replace(settings.export,
                                                                     max_duration=3.0))
    started = time.monotonic()
    export, _ = create_export(store, quick, ExportRequest(source="main",
                                                          tables=("events", "users")),
                              project="p")
    overdue = [reconcile_once(store, quick).overdue]
    if time.monotonic() - started < 2.0:  # (a stall of seconds, seen in CI, may pass it)
        assert overdue == [0]  # not yet past its duration
    time.sleep(3.0)
    assert wait_until(lambda: overdue.append(reconcile_once(store, quick).overdue)
                      or sum(overdue) == 1, 30, every=0.2)
    failed = store.export_get("p", export.id)
    assert failed is not None and failed.state is ExportState.FAILED
    assert "exceeded maximum duration (3s)" in (failed.error or "")
    assert {t.state for t in store.task_list(export.id)} == {TaskState.CANCELLED}
    assert reconcile_once(store, quick).overdue == 0  # once only


def test_an_export_left_unfinalized_is_completed_by_the_reconciler(
    settings: Settings, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    export, _ = create_export(store, settings, ExportRequest(source="main",
                                                             tables=("events", "users")),
                              project="p")

    def dies_before_finalizing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("worker died between the last task and the manifest")

    monkeypatch.setattr(runner_module, "finalize_export", dies_before_finalizing)
    run_every_task(store, settings)
    assert {t.state for t in store.task_list(export.id)} == {TaskState.DONE}
    stuck = store.export_get("p", export.id)
    assert stuck is not None and stuck.state is ExportState.RUNNING
    root = export_root(settings, stuck)
    assert not (root / "_SUCCESS").exists()

    report = reconcile_once(store, settings)
    assert report.finalized == 1
    done = store.export_get("p", export.id)
    assert done is not None and done.state is ExportState.COMPLETED
    manifest = json.loads((root / "manifest.json").read_text())
    assert {t["table"]: t["rows"] for t in manifest["tables"]} == {"events": 500, "users": 50}
    assert (root / "_SUCCESS").exists()
    assert reconcile_once(store, settings).finalized == 0


def test_a_worker_killed_right_after_completing_an_export_leaves_no_staging_area(
    settings: Settings, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the staging area is removed before the export is marked completed: nothing would
    # remove it after (the reconciler leaves completed exports alone), and a zombie
    # writer could make its staged copy there
    export, _ = create_export(store, settings, ExportRequest(source="main",
                                                             tables=("events", "users")),
                              project="p")
    complete = store.export_complete

    def completes_then_dies(*args: object, **kwargs: object) -> bool:
        complete(*args, **kwargs)  # type: ignore[arg-type]
        raise RuntimeError("killed right after the export was marked completed")

    monkeypatch.setattr(store, "export_complete", completes_then_dies)
    run_every_task(store, settings)
    done = store.export_get("p", export.id)
    assert done is not None and done.state is ExportState.COMPLETED
    root = export_root(settings, done)
    assert (root / "_SUCCESS").exists()
    assert not (root / ".egress" / "staging").exists()


def test_a_finalizer_that_dies_after_another_completed_the_export_leaves_no_staging_area(
    settings: Settings, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two finalizers of one export (the slot's and the reconciler's) may run at once: the
    # one that opens the sink after the other removed the staging area must not make it
    # again, or dying before its own removal would leave one for a late writer
    export, _ = create_export(store, settings, ExportRequest(source="main",
                                                             tables=("events",)),
                              project="p")
    monkeypatch.setattr(runner_module, "finalize_export", lambda *args, **kwargs: False)
    run_every_task(store, settings)
    stale = store.export_get("p", export.id)
    assert stale is not None and stale.state is ExportState.RUNNING
    assert finalize_module.finalize_export(store, settings, export.id)
    root = export_root(settings, stale)
    assert (root / "_SUCCESS").exists() and not (root / ".egress" / "staging").exists()

    def dies(*args: object, **kwargs: object) -> None:
        raise RuntimeError("killed while writing the manifest")

    # the second one read the export while it was running, and dies half-way
    monkeypatch.setattr(store, "export_get", lambda project, export_id: stale)
    monkeypatch.setattr(finalize_module, "write_manifest", dies)
    with pytest.raises(RuntimeError, match="killed while writing"):
        finalize_module.finalize_export(store, settings, export.id)
    assert not (root / ".egress" / "staging").exists()


@pytest.mark.parametrize("tables", [("events",), ("events", "users")])
def test_the_worker_that_ends_an_export_describes_no_table_twice(
    settings: Settings, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch,
    tables: tuple[str, ...],
) -> None:
    # Finishing an export needs every table's description; the worker that ran the last
    # task has its own table's already, and a source (on a production database: a
    # connection or two) is opened again only for the others, each described once.
    from egress.worker import finalize as finalize_module

    described: list[str] = []
    opened = 0
    real_open = finalize_module.export_source

    def counting_open(*args: object, **kwargs: object) -> object:
        nonlocal opened
        opened += 1
        source = real_open(*args, **kwargs)  # type: ignore[arg-type]
        real_describe = source.describe

        def describe(table: str) -> object:
            described.append(table)
            return real_describe(table)

        source.describe = describe  # type: ignore[method-assign]
        return source

    monkeypatch.setattr(finalize_module, "export_source", counting_open)
    export, _ = create_export(store, settings, ExportRequest(source="main", tables=tables),
                              project="p")
    run_every_task(store, settings)
    done = store.export_get("p", export.id)
    assert done is not None and done.state is ExportState.COMPLETED
    last = {t.table for t in store.task_list(export.id)} - set(described)
    assert len(last) == 1  # the last task's table came from its own slice
    assert sorted(described) == sorted(set(tables) - last)  # the others, once each
    assert opened == (1 if len(tables) > 1 else 0)
    manifest = json.loads((export_root(settings, done) / "manifest.json").read_text())
    rows = {"events": 500, "users": 50}
    assert {t["table"]: t["rows"] for t in manifest["tables"]} == {t: rows[t] for t in tables}
