"""Many projects' exports drained by four worker processes on one PostgreSQL store: none
lost, none run twice (from the store and the outputs), the per-project cap holds and no
project starves. ``bench/fleet.py drain`` runs the full size (10,000 exports, 50
projects) and reports the waiting times."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress.store.sql import SqlJobStore
from fleetharness import create_round_robin, drain_report, make_rows_source
from jobsharness import drain_with_workers, write_home

pytestmark = pytest.mark.slow
PROJECTS, PER_PROJECT, ROWS, WORKERS, CAP = 12, 25, 1000, 4, 2


def test_four_workers_drain_many_projects_fairly_and_exactly_once(
    tmp_path: Path, pg_server
) -> None:
    source = make_rows_source(tmp_path / "rows.db", ROWS)
    store_url = pg_server.create_database("fleet")
    settings = write_home(
        tmp_path / "home", store_url=store_url, sources={"main": source},
        worker={"concurrency": 2, "lease_seconds": 60.0, "poll_seconds": 0.05,
                "reconcile_seconds": 1.0, "project_cap": CAP},
    )
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        exports = create_round_robin(store, settings, PROJECTS, PER_PROJECT)
        drain_with_workers(settings.home, WORKERS, tmp_path / "workers.log", 300)
        report = drain_report(store, settings, exports, ROWS)
    finally:
        store.close()
    assert report.completed == report.exports == PROJECTS * PER_PROJECT
    assert report.finished_twice == [] and report.wrong_outputs == []
    # the cap held (8 slots, 12 projects: a project could have had 8 otherwise)
    assert max(report.most_running.values()) <= CAP
    assert set(report.most_running) == {f"p{p:03d}" for p in range(PROJECTS)}
    # no project starves: the projects were created one block after another, yet every
    # one had its first claim among the first claims of all (first come, first served
    # would run the first project's 25 exports before the second's first)
    assert set(report.first_claim_index) == {f"p{p:03d}" for p in range(PROJECTS)}
    assert max(report.first_claim_index.values()) < 2 * PROJECTS, report.first_claim_index
    assert report.spread() < PROJECTS, report.wait_table()
