"""Many workers on one PostgreSQL store: 8 processes drain 2,000 tiny exports, and every
task is claimed once and finished once (no double claims under SKIP LOCKED)."""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path

import pytest

from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from jobsharness import drain_with_workers, write_home

pytestmark = pytest.mark.slow
EXPORTS = 2000
WORKERS = 8


def test_eight_workers_drain_two_thousand_exports(tmp_path: Path, pg_server) -> None:
    db = tmp_path / "tiny.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE tiny (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO tiny VALUES (?, ?)", [(i, f"v{i}") for i in range(20)])
    conn.commit()
    conn.close()
    store_url = pg_server.create_database("many")
    settings = write_home(
        tmp_path / "home", store_url=store_url, sources={"tiny": f"sqlite:///{db}"},
        worker={"concurrency": 1, "lease_seconds": 120.0, "poll_seconds": 0.05,
                "reconcile_seconds": 1.0, "project_cap": 100},
    )
    store = SqlJobStore(store_url)
    try:
        _drain(store, settings, tmp_path)
    finally:
        store.close()


def _drain(store, settings, tmp_path: Path) -> None:
    store.migrate()
    ids = [
        create_export(store, settings, ExportRequest(source="tiny", tables=("tiny",)))[0].id
        for _ in range(EXPORTS)
    ]
    drain_with_workers(settings.home, WORKERS, tmp_path / "workers.log", 600)
    states = collections.Counter(store.export_get(None, i).state for i in ids)
    assert states == {ExportState.COMPLETED: EXPORTS}
    kinds = collections.defaultdict(collections.Counter)
    for e in store.lease_events():
        kinds[e.task_id][e.kind] += 1
    assert len(kinds) == EXPORTS
    for task_id, counts in kinds.items():
        assert counts["claim"] == 1 and counts["finish"] == 1, (task_id, counts)
    workers_used = {e.worker for e in store.lease_events() if e.kind == "claim"}
    assert len(workers_used) > 1
