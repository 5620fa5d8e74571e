"""Worker processes against real stores: zombie, SIGTERM hand-over, PostgreSQL restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from egress.store.writelock import flock_holders
from jobsharness import (
    all_terminal,
    check_leases,
    export_outputs,
    make_events_db,
    reference_outputs,
    start_worker,
    stop,
    wait_until,
    write_home,
)

pytestmark = pytest.mark.slow
PART_ROWS = 2000


@pytest.fixture(autouse=True)
def _close_stores():
    """Stores opened by a test are closed after it (their pooled connections too)."""
    opened.clear()
    yield
    for store in opened:
        store.close()


opened: list[SqlJobStore] = []


def _setup(tmp_path: Path, store_url: str, sizes: dict[str, int], **worker):
    source = make_events_db(tmp_path / "source.db", sizes)
    settings = write_home(
        tmp_path / "home", store_url=store_url, sources={"main": source},
        worker={"concurrency": 1, "heartbeat_seconds": 0.3, "reconcile_seconds": 0.3,
                "poll_seconds": 0.1, "backoff_seconds": 0.2, "max_attempts": 20, **worker},
    )
    store = SqlJobStore(store_url)
    opened.append(store)
    store.migrate()
    return source, settings, store


def _create(store, settings, table: str, fmt: str = "csv", comp: str = "gzip"):
    request = ExportRequest(source="main", tables=(table,), format=fmt, compression=comp,
                            options={"part_rows": PART_ROWS})
    return create_export(store, settings, request)[0]


def _claims(store, task_id: str) -> list:
    return [e for e in store.lease_events(task_id) if e.kind == "claim"]


def test_zombie_worker_cannot_write_after_losing_its_lease(tmp_path: Path, pg_server) -> None:
    store_url = pg_server.create_database("zombie")
    source, settings, store = _setup(
        tmp_path, store_url, {"big": 300_000}, lease_seconds=1.5, slice_seconds=30.0
    )
    export = _create(store, settings, "big")
    (task,) = store.task_list(export.id)
    log = tmp_path / "workers.log"
    zombie = start_worker(settings.home, log)
    try:
        assert wait_until(lambda: (store.task_get(task.id).rows or 0) > 20_000, 60)
        zombie.send_signal(signal.SIGSTOP)
        frozen_token = _claims(store, task.id)[-1].lease_token
        rescuer = start_worker(settings.home, log)
        try:
            # the rescuer's reconciler requeues the expired lease and claims the task
            assert wait_until(lambda: _claims(store, task.id)[-1].lease_token != frozen_token, 30)
            assert wait_until(lambda: store.task_get(task.id).rows > 60_000, 60)
            zombie.send_signal(signal.SIGCONT)
            assert wait_until(lambda: all_terminal(store, [export.id]), 120)
        finally:
            stop(rescuer)
    finally:
        zombie.send_signal(signal.SIGCONT)
        stop(zombie)
    events = store.lease_events(task.id)
    assert check_leases(events) == []
    claim_at = {e.lease_token: e.id for e in events if e.kind == "claim"}
    takeover = max(claim_at.values())
    late = [e for e in events if e.lease_token == frozen_token and e.id > takeover
            and e.kind in ("commit", "finish", "requeue")]
    assert late == [], "the frozen worker wrote after its lease was taken over"
    assert store.export_get(None, export.id).state is ExportState.COMPLETED
    expected = reference_outputs(source, "big", "csv", "gzip", PART_ROWS, tmp_path / "ref")
    assert export_outputs(settings, export) == expected


def _stop_while_holding(proc, lock: Path, timeout: float) -> bool:
    """SIGSTOP ``proc`` at a moment the kernel's lock table shows it holding the SQLite
    store's write lock (it takes it around each write transaction, many times a second);
    False if that was not caught within ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.pid in flock_holders(lock):
            proc.send_signal(signal.SIGSTOP)
            wait_until(lambda: "T (stopped)" in Path(f"/proc/{proc.pid}/status").read_text(),
                       5, every=0.005)
            if proc.pid in flock_holders(lock):
                return True
            proc.send_signal(signal.SIGCONT)  # it let go just before the stop: again
        time.sleep(0.002)
    return False


def test_a_worker_stopped_inside_a_sqlite_store_write_is_killed_and_its_task_rescued(
    tmp_path: Path
) -> None:
    """A worker frozen (SIGSTOP) while it holds the SQLite store's write lock: readers go
    on reading, and the next worker to write kills it once it has waited the bound, takes
    its task over after the lease and finishes the export with the same bytes."""
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    source, settings, store = _setup(
        tmp_path, store_url, {"big": 300_000}, lease_seconds=1.5, slice_seconds=30.0
    )
    export = _create(store, settings, "big")
    (task,) = store.task_list(export.id)
    log = tmp_path / "workers.log"
    frozen = start_worker(settings.home, log)
    try:
        assert wait_until(lambda: (store.task_get(task.id).rows or 0) > 20_000, 60)
        assert _stop_while_holding(frozen, tmp_path / "store.db-writelock", 30)
        frozen_token = _claims(store, task.id)[-1].lease_token

        started = time.monotonic()
        reader = SqlJobStore(store_url)
        opened.append(reader)
        reader.migrate()  # a current schema is only read
        assert reader.export_get(None, export.id) is not None and reader.task_list(export.id)
        assert time.monotonic() - started < 1.0  # milliseconds; waiting would be for ever
        env = {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}
        shown = subprocess.run(
            [sys.executable, "-m", "egress.cli", "jobs", "show", export.id],
            env={**env, "EGRESS_HOME": str(settings.home)}, capture_output=True, text=True,
            timeout=60,
        )
        assert shown.returncode == 0 and export.id in shown.stdout, shown.stderr

        rescuer = start_worker(settings.home, log, env_extra={"EGRESS_STORE_LOCK_SECONDS": "3"})
        try:
            assert frozen.wait(60) == -signal.SIGKILL
            assert wait_until(lambda: all_terminal(store, [export.id]), 120)
        finally:
            stop(rescuer)
    finally:
        frozen.send_signal(signal.SIGCONT)
        stop(frozen)
    assert f"killed process {frozen.pid} (t (stopped))" in log.read_text()
    assert _claims(store, task.id)[-1].lease_token != frozen_token
    assert check_leases(store.lease_events(task.id)) == []
    assert store.export_get(None, export.id).state is ExportState.COMPLETED
    expected = reference_outputs(source, "big", "csv", "gzip", PART_ROWS, tmp_path / "ref")
    assert export_outputs(settings, export) == expected


def test_sigterm_hands_tasks_over_at_once(tmp_path: Path, pg_server) -> None:
    store_url = pg_server.create_database("sigterm")
    # leases far longer than the hand-over we accept: only a release can explain it
    source, settings, store = _setup(
        tmp_path, store_url, {"a": 1_000_000}, lease_seconds=60.0, slice_seconds=60.0,
        grace_seconds=10.0,
    )
    export = _create(store, settings, "a", "jsonl", "gzip")
    (task,) = store.task_list(export.id)
    log = tmp_path / "workers.log"
    workers = [start_worker(settings.home, log) for _ in range(2)]
    try:
        # both are up and polling; the one holding the lease gets the SIGTERM
        assert wait_until(lambda: (store.task_get(task.id).rows or 0) > 10_000, 60)
        holder_pid = int(_claims(store, task.id)[-1].worker.split(":")[1])
        (first,) = [w for w in workers if w.pid == holder_pid]
        assert store.task_get(task.id).state.value == "running"
        sent = time.monotonic()
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=10)
        exited_after = time.monotonic() - sent
        assert first.returncode == 0
        assert exited_after < 10
        events = store.lease_events(task.id)
        release = [e for e in events if e.kind in ("requeue", "release")][-1]
        assert wait_until(lambda: len(_claims(store, task.id)) >= 2, 5)
        reclaim = _claims(store, task.id)[-1]
        assert reclaim.at - release.at < 2.0
        assert int(reclaim.worker.split(":")[1]) != holder_pid
        assert wait_until(lambda: all_terminal(store, [export.id]), 180)
    finally:
        for w in workers:
            stop(w)
    assert check_leases(store.lease_events()) == []
    assert store.export_get(None, export.id).state is ExportState.COMPLETED
    expected = reference_outputs(source, "a", "jsonl", "gzip", PART_ROWS, tmp_path / "ref")
    assert export_outputs(settings, export) == expected


def test_postgres_restart_mid_export(tmp_path: Path, pg_server) -> None:
    store_url = pg_server.create_database("restart")
    sizes = {"r1": 150_000, "r2": 150_000, "r3": 100_000}
    source, settings, store = _setup(
        tmp_path, store_url, sizes, lease_seconds=5.0, slice_seconds=1.0
    )
    exports = [_create(store, settings, t, "parquet" if t == "r3" else "csv", "none")
               for t in sizes]
    log = tmp_path / "workers.log"
    workers = [start_worker(settings.home, log) for _ in range(2)]
    try:
        assert wait_until(
            lambda: sum(t.rows for e in exports for t in store.task_list(e.id)) > 50_000, 60
        )
        pg_server.restart()
        assert wait_until(lambda: all_terminal(store, [e.id for e in exports]), 180)
    finally:
        for w in workers:
            stop(w)
    for export in exports:
        assert store.export_get(None, export.id).state is ExportState.COMPLETED
        expected = reference_outputs(source, export.tables[0], export.format, export.compression,
                                     PART_ROWS, tmp_path / "ref" / export.id)
        assert export_outputs(settings, export) == expected
    assert check_leases(store.lease_events()) == []
