"""A writer that slept past its lease (a paused VM, SIGSTOP, a debugger) writes nothing
when it wakes: every write to the sink is fenced by the store, not only the commits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from egress.worker.runner import TaskRunner
from jobsharness import make_events_db, write_home


def test_a_zombie_writes_nothing_into_the_new_owners_export(tmp_path: Path,
                                                           store_url: str) -> None:
    source = make_events_db(tmp_path / "src.db", {"t": 5000})
    settings = write_home(tmp_path / "home", store_url=store_url, sources={"main": source},
                          worker={"lease_seconds": 0.5, "heartbeat_seconds": 30.0,
                                  "slice_seconds": 0.01})
    store = SqlJobStore(store_url)
    store.migrate()
    try:
        export, _ = create_export(store, settings, ExportRequest(
            source="main", tables=("t",), options={"part_rows": 500}), project="p")
        # a first slice plans the task and commits a part: later slices write before
        # they commit anything
        [first] = store.task_claim("first", lease_seconds=60, project_cap=10)
        runner = TaskRunner(store, settings, threading.Event())
        assert runner.run(first) == "requeued"
        root = export_root(settings, export)
        before = {p: (p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*") if p.is_file()}
        assert before  # the staged file with the committed part
        [zombie] = store.task_claim("zombie", lease_seconds=0.5, project_cap=10)
        time.sleep(0.8)  # the zombie sleeps past its lease …
        assert store.task_rescue_expired() == 1
        [owner] = store.task_claim("owner", lease_seconds=60, project_cap=10)
        assert owner.lease_token != zombie.lease_token
        # … and wakes: its heartbeat has not told it yet (30 s away), the store does
        time.sleep(0.05)  # a write now would show in the file's mtime
        outcome = runner.run(zombie)
        assert outcome == "lost"
        after = {p: (p.stat().st_size, p.stat().st_mtime_ns)
                 for p in root.rglob("*") if p.is_file()}
        assert after == before  # not a byte of the zombie's
        assert store.task_get(owner.id).lease_token == owner.lease_token
    finally:
        store.close()
