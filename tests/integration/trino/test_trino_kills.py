"""Worker processes killed with SIGKILL around a Trino export: while its query is
submitted (another worker polls it to the end: the state is in the store), and while its
result streams (the output is that of one uninterrupted run, never duplicated rows)."""

from __future__ import annotations

import csv
import random
import subprocess
from pathlib import Path

import pytest

from egress.config import load_settings
from egress.domain.jobs import ExportState, TaskState
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from jobsharness import start_worker, stop, wait_until
from trino_protocol import QueryPlan, TrinoProtocolServer
from trinoharness import SCALE, Warehouse, rows, trino_url

pytestmark = pytest.mark.slow


def make_home(home: Path, server: TrinoProtocolServer) -> Path:
    home.mkdir(parents=True)
    delays = ", ".join(str(d * SCALE) for d in (2, 3, 5, 8, 13, 21, 34, 55, 89, 90))
    (home / "egress.toml").write_text(
        f'[store]\nurl = "sqlite:///{home / "store.db"}"\n'
        f'[sources.wh]\nurl = "{trino_url(server)}"\n'
        "[worker]\nslice_seconds = 1.0\nlease_seconds = 3.0\nheartbeat_seconds = 0.5\nnice = 0\n"
        "poll_seconds = 0.05\nreconcile_seconds = 0.2\nconcurrency = 1\n"
        # a poll pass killed with the task taken holds it from the others for
        # poll_hold_seconds (60 s by default: as long as the second worker was given,
        # which made the first test time out when the kill landed in a poll pass)
        f"[remote]\npoll_delays = [{delays}]\npoll_pass_seconds = 0.05\n"
        "poll_hold_seconds = 2.0\n")
    return home


def _tail(log: Path, lines: int = 40) -> str:
    """The end of a worker's log, for a failure's message."""
    try:
        return "\n".join(log.read_text().splitlines()[-lines:])
    except OSError:
        return f"(no {log.name})"


def read_csv(root: Path, table: str) -> list[list[str]]:
    got: list[list[str]] = []
    for path in sorted(root.glob(f"{table}*.csv")):
        with path.open(newline="") as f:
            got.extend(list(csv.reader(f))[1:])
    return got


def test_a_worker_killed_while_the_query_is_submitted_is_not_needed(
        tmp_path: Path, trino: TrinoProtocolServer, warehouse: Warehouse) -> None:
    trino.plan_for(r'"orders"', QueryPlan(queued_polls=8, page_rows=50))
    home = make_home(tmp_path / "home", trino)
    settings = load_settings(home, env={})
    store = SqlJobStore(settings.store_url)
    store.migrate()
    try:
        export, _ = create_export(store, settings, ExportRequest(
            source="wh", tables=("orders",), options={"role": "analyst"}), project="p")
        first = start_worker(home, tmp_path / "a.log")
        try:
            assert wait_until(lambda: store.task_list(export.id)[0].state
                              is TaskState.SUBMITTED, 30, every=0.02)
        finally:
            stop(first)  # SIGKILL, with the query queued on the engine
        assert store.task_list(export.id)[0].poll_count < 8  # still queued there
        second = start_worker(home, tmp_path / "b.log", "--exit-when-idle")
        try:
            code = second.wait(60)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            stop(second)  # never left running after the test (it would poll for ever)
        assert code == 0, (store.task_list(export.id), _tail(tmp_path / "b.log"))
        done = store.export_get("p", export.id)
        assert done is not None and done.state is ExportState.COMPLETED, done.error
        want = [[str(r[0]), r[1], r[2], r[3]] for r in warehouse.tables["orders"].rows]
        assert read_csv(export_root(settings, done), "orders") == want
        posts = [r for r in trino.requests if r.method == "POST" and '"orders"' in r.body]
        assert len(posts) == 1  # polled on by the second worker, not submitted again
    finally:
        store.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_worker_killed_mid_stream_leaves_no_duplicate_rows(
        tmp_path: Path, trino: TrinoProtocolServer, warehouse: Warehouse, seed: int) -> None:
    warehouse.add("big", rows(6000))
    trino.plan_for(r'"big"', QueryPlan(queued_polls=1, page_rows=250, page_delay=0.05))
    home = make_home(tmp_path / "home", trino)
    settings = load_settings(home, env={})
    store = SqlJobStore(settings.store_url)
    store.migrate()
    try:
        export, _ = create_export(store, settings, ExportRequest(
            source="wh", tables=("big",), options={"role": "analyst", "part_rows": 400}),
            project="p")
        kill_after = random.Random(seed).randint(400, 4000)
        first = start_worker(home, tmp_path / "a.log")
        try:
            assert wait_until(lambda: store.task_list(export.id)[0].rows >= kill_after,
                              60, every=0.01)
        finally:
            stop(first)
        assert store.task_list(export.id)[0].state is not TaskState.DONE
        second = start_worker(home, tmp_path / "b.log", "--exit-when-idle")
        try:
            code = second.wait(90)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            stop(second)
        assert code == 0, (store.task_list(export.id), _tail(tmp_path / "b.log"))
        done = store.export_get("p", export.id)
        assert done is not None and done.state is ExportState.COMPLETED, done.error
        want = [[str(r[0]), r[1], r[2], r[3]] for r in warehouse.tables["big"].rows]
        assert read_csv(export_root(settings, done), "big") == want  # once each, in order
        [task] = store.task_list(export.id)
        # which of the two happened is on the task: continued, or started over
        note = task.remote_note or ""
        assert note == "" or note.startswith("restarted from nothing"), note
        assert (done.manifest or {})["tables"][0]["rows"] == 6000
    finally:
        store.close()
