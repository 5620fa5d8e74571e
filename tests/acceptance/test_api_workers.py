"""Workers without database credentials (``egress worker --api``) through SIGKILL and
SIGTERM: the output is the bytes of an uninterrupted direct-store run."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from apiharness import serve_process
from egress.cli import main
from egress.config import load_settings
from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
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


def test_two_api_workers_through_a_kill_and_a_term_write_the_reference_bytes(
    tmp_path: Path, pg_server
) -> None:
    source = make_events_db(tmp_path / "source.db", {"big": 200_000, "small": 30_000})
    exports = tmp_path / "exports"  # the local destination both sides see (a shared volume)
    store_url = pg_server.create_database("api_workers")
    # the API's home: the store, the sources, the destination
    settings = write_home(tmp_path / "api", store_url=store_url, sources={"main": source},
                          worker={})
    with open(settings.home / "egress.toml", "a") as toml:
        toml.write(f'\n[destinations.local]\ntype = "local"\npath = "{exports}"\n')
    settings = load_settings(settings.home, env={})
    # the workers' home: sources and destination, and no store at all
    worker_home = tmp_path / "workers"
    worker_home.mkdir()
    (worker_home / "egress.toml").write_text(
        f'[sources.main]\nurl = "{source}"\n\n'
        f'[destinations.local]\ntype = "local"\npath = "{exports}"\n\n'
        "[worker]\nconcurrency = 1\nheartbeat_seconds = 0.3\nreconcile_seconds = 0.3\n"
        "poll_seconds = 0.1\nbackoff_seconds = 0.2\nmax_attempts = 20\nlease_seconds = 2.0\n"
        "slice_seconds = 2.0\nnice = 0\n")
    store = SqlJobStore(store_url)
    store.migrate()
    made = CliRunner().invoke(main, ["tokens", "create", "--home", str(settings.home),
                                     "--project", "fleet", "--scopes", "worker"])
    assert made.exit_code == 0, made.output
    token = made.stdout.strip()
    api, base = serve_process(settings.home, tmp_path / "api.log", "--no-worker")
    log = tmp_path / "workers.log"
    env = {"EGRESS_WORKER_API_URL": base, "EGRESS_WORKER_API_TOKEN": token}
    try:
        ids = [create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt, compression=comp,
            options={"part_rows": PART_ROWS}))[0].id
            for table, fmt, comp in (("big", "csv", "gzip"), ("small", "jsonl", "zstd"))]
        killed = start_worker(worker_home, log, env_extra=env)
        termed = start_worker(worker_home, log, env_extra=env)
        [big_task] = store.task_list(ids[0])
        assert wait_until(lambda: (store.task_get(big_task.id).rows or 0) > 30_000, 90), \
            log.read_text()
        stop(killed, signal.SIGKILL)
        rescuer = start_worker(worker_home, log, env_extra=env)
        assert wait_until(lambda: (store.task_get(big_task.id).rows or 0) > 100_000, 90), \
            log.read_text()
        stop(termed, signal.SIGTERM)
        assert termed.returncode == 0, log.read_text()
        assert wait_until(lambda: all_terminal(store, ids), 120), log.read_text()
        stop(rescuer, signal.SIGTERM)
    finally:
        stop(api, signal.SIGTERM)
    text = log.read_text()
    assert token not in text and store_url not in text
    for export_id, (table, fmt, comp) in zip(
            ids, (("big", "csv", "gzip"), ("small", "jsonl", "zstd")), strict=True):
        export = store.export_get(None, export_id)
        assert export.state is ExportState.COMPLETED, export.error
        for task in store.task_list(export_id):
            assert check_leases(store.lease_events(task.id)) == []
        expected = reference_outputs(source, table, fmt, comp, PART_ROWS,
                                     tmp_path / f"ref-{table}")
        assert export_outputs(settings, export) == expected
    # the workers never opened a store of their own
    assert not list(worker_home.glob("egress.db*"))
    store.close()

