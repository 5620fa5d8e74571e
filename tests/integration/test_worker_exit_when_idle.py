"""``egress worker --exit-when-idle`` while another worker still holds a task: it stays,
with one cheap check per poll, and reconciles on its reconciler's schedule only (a full
reconcile pass on every poll cost a fleet draining tiny exports a fifth of its CPU).
That it exits once the last export has ended, every test that drains with such workers
checks."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import egress.worker.loop as loop
from egress.config import load_settings
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from jobsharness import make_events_db, wait_until, write_home

POLL = 0.01
RECONCILE = 1.0


def test_an_idle_worker_waits_for_the_others_and_reconciles_on_schedule_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make_events_db(tmp_path / "src.db", {"t": 100})
    store_url = f"sqlite:///{tmp_path / 'home' / 'egress.db'}"
    write_home(tmp_path / "home", store_url=store_url, sources={"main": source},
               worker={"poll_seconds": POLL, "reconcile_seconds": RECONCILE})
    settings = load_settings(tmp_path / "home", env={})
    passes: list[float] = []
    real = loop.reconcile_once

    def counted(*args, **kwargs):
        passes.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "reconcile_once", counted)
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        create_export(store, settings, ExportRequest(source="main", tables=("t",)))
        # another (live) worker holds the only task: nothing for this one to claim
        assert store.task_claim("other", lease_seconds=300, project_cap=10)
        worker = Worker(store, settings)
        exits: list[int] = []
        thread = threading.Thread(target=lambda: exits.append(worker.run(exit_when_idle=True)))
        started = time.monotonic()
        thread.start()
        time.sleep(2.5 * RECONCILE)
        assert wait_until(lambda: passes, 30)  # the reconciler runs (late on a busy machine)
        assert thread.is_alive(), "exited while an export was still running"
        idle_for = time.monotonic() - started
        # the reconciler thread's passes only: one a RECONCILE (the old idle check ran
        # one every POLL: over a hundred here)
        assert len(passes) <= idle_for / RECONCILE + 1, passes
        worker.stopping.set()
        thread.join(30)
        assert not thread.is_alive() and exits == [0]
    finally:
        store.close()


def test_with_nothing_queued_it_exits_without_waiting_a_poll(tmp_path: Path) -> None:
    # a batch job or a scaled-to-zero deployment started on an empty queue: it checks at
    # once (it used to wait one poll_seconds first, 0.5 s by default)
    poll = 5.0
    store_url = f"sqlite:///{tmp_path / 'home' / 'egress.db'}"
    write_home(tmp_path / "home", store_url=store_url, sources={},
               worker={"poll_seconds": poll})
    settings = load_settings(tmp_path / "home", env={})
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        worker = Worker(store, settings)
        started = time.monotonic()
        assert worker.run(exit_when_idle=True) == 0
        assert time.monotonic() - started < poll / 2
    finally:
        store.close()
