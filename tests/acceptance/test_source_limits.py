"""Source protection across the fleet: worker processes never run more tasks of a
source than its ``max_tasks`` (asserted from the store's lease log, not from timing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress.domain.jobs import ExportRecord, ExportState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from jobsharness import (
    check_leases,
    export_outputs,
    make_events_db,
    most_live_leases,
    reference_outputs,
    run_ready_workers,
    write_home,
)

pytestmark = pytest.mark.slow
TABLES = [f"t{i}" for i in range(6)]


@pytest.mark.parametrize("store_kind", ["sqlite", pytest.param("postgresql",
                                                               marks=pytest.mark.postgres)])
def test_three_workers_run_at_most_two_tasks_of_a_source_limited_to_two(
    tmp_path: Path, store_kind: str, request: pytest.FixtureRequest
) -> None:
    if store_kind == "sqlite":
        store_url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        store_url = request.getfixturevalue("pg_server").create_database("source_limits")
    source = make_events_db(tmp_path / "source.db", dict.fromkeys(TABLES, 12_000))
    # three workers of one slot each: three slots for six tasks, two of them allowed. With
    # one slot a process, two live leases are two processes: the limit is the fleet's.
    settings = write_home(
        tmp_path / "home", store_url=store_url, sources={"main": source},
        # reads paced at 20k rows/s: a task's 12,000 rows take at least 0.6 s, so every
        # task needs several 0.3 s slices however fast the machine is (on a quiet one
        # each task once ran in a single slice, and the slots never changed hands)
        source_limits={"main": {"max_tasks": 2, "max_rows_per_second": 20_000}},
        worker={"concurrency": 1, "slice_seconds": 0.3, "poll_seconds": 0.05,
                "heartbeat_seconds": 0.3, "reconcile_seconds": 0.3},
    )
    assert settings.source_task_limits() == {"main": 2}
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        created: list[ExportRecord] = []

        def create() -> None:
            export, _ = create_export(store, settings, ExportRequest(
                source="main", tables=tuple(TABLES), format="csv", compression="gzip",
                options={"part_rows": 1000}))
            created.append(export)

        def finished() -> bool:
            got = store.export_get(None, created[0].id)
            return got is not None and got.state.terminal

        # The export is created once all three are claiming: the first process to start
        # cannot drain it before the others are up (CI once saw one process take all).
        run_ready_workers(settings.home, 3, tmp_path / "workers.log", finished, 300,
                          start_work=create)
        done = store.export_get(None, created[0].id)
        assert done is not None and done.state is ExportState.COMPLETED
        events = store.lease_events()
        tasks = store.task_list(done.id)
    finally:
        store.close()
    assert check_leases(events) == []
    claims = [e for e in events if e.kind == "claim"]
    assert len(claims) > len(TABLES)  # many slices: the slots changed hands often
    assert len({e.worker for e in claims}) > 1
    assert most_live_leases(events, [t.id for t in tasks]) == 2
    for table in TABLES:
        expected = reference_outputs(source, table, "csv", "gzip", 1000, tmp_path / table)
        got = {k: v for k, v in export_outputs(settings, done).items() if k.startswith(table)}
        assert got == expected
