"""``egress worker --metrics-port``: a real worker process serves /metrics, /healthz and
/readyz; its series move during an export; /healthz names a loop that is stuck."""

from __future__ import annotations

import json
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from jobsharness import make_events_db, start_worker, stop, wait_until, write_home

ROWS = 40_000

#: Every series the worker's /metrics must show from the start (name, labels).
EXPECTED = [
    ("egress_exports", {"state": "completed"}),
    ("egress_tasks", {"state": "queued"}),
    ("egress_tasks", {"state": "done"}),
    ("egress_tasks_ready", {}),
    ("egress_tasks_ready_oldest_age_seconds", {}),
    ("egress_claim_duration_seconds_count", {"result": "claimed"}),
    ("egress_slice_duration_seconds_count", {}),
    ("egress_slices_total", {"outcome": "done"}),
    ("egress_lease_renewals_total", {"result": "ok"}),
    ("egress_lease_losses_total", {"reason": "refused"}),
    ("egress_stale_claims_reset_total", {}),
    ("egress_retries_total", {"reason": "source"}),
    ("egress_webhook_attempts_total", {"outcome": "success"}),
    ("egress_webhook_deliveries_total", {"outcome": "failed"}),
]


@pytest.fixture
def store_of() -> Iterator[list[SqlJobStore]]:
    opened: list[SqlJobStore] = []
    yield opened
    for store in opened:
        store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:  # not listening yet
        return 0, b""


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    status, body = get(port, "/metrics")
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def setup(tmp_path: Path, store_url: str, stores: list[SqlJobStore]):
    source = make_events_db(tmp_path / "source.db", {"events": ROWS})
    settings = write_home(
        tmp_path / "home", store_url=store_url, sources={"main": source},
        worker={"concurrency": 1, "heartbeat_seconds": 0.2, "slice_seconds": 0.5,
                "reconcile_seconds": 0.3, "poll_seconds": 0.1},
    )
    store = SqlJobStore(store_url)
    stores.append(store)
    store.migrate()
    return settings, store


def test_worker_metrics_move_during_an_export(tmp_path: Path, store_url: str,
                                              store_of: list[SqlJobStore]) -> None:
    settings, store = setup(tmp_path, store_url, store_of)
    port = free_port()
    worker = start_worker(settings.home, tmp_path / "worker.log", "--metrics-port", str(port))
    try:
        assert wait_until(lambda: get(port, "/readyz")[0] == 200, 60), \
            (tmp_path / "worker.log").read_text()
        before = scrape(port)
        missing = [(n, labels) for n, labels in EXPECTED if value(before, n, **labels) is None]
        assert not missing, missing
        assert value(before, "egress_tasks", state="done") == 0
        assert value(before, "egress_slice_duration_seconds_count") == 0

        request = ExportRequest(source="main", tables=("events",), format="csv",
                                compression="gzip", options={"part_rows": 1000})
        export, _ = create_export(store, settings, request)
        assert wait_until(lambda: store.export_get(None, export.id).state.terminal, 120)
        assert store.export_get(None, export.id).state is ExportState.COMPLETED
        (task,) = store.task_list(export.id)
        assert task.rows == ROWS

        # the gauges are read from the store at most every few seconds; the slice's own
        # series move once it returns, just after the export completed
        def settled() -> bool:
            now = scrape(port)
            return (value(now, "egress_tasks", state="done") == 1
                    and value(now, "egress_slices_total", outcome="done") == 1)

        assert wait_until(settled, 30)
        after = scrape(port)
        assert value(after, "egress_exports", state="completed") == 1
        assert value(after, "egress_tasks", state="queued") == 0
        assert value(after, "egress_tasks_ready") == 0
        labels = {"format": "csv", "destination_type": "local"}
        assert value(after, "egress_rows_exported_total", **labels) == ROWS
        assert value(after, "egress_bytes_exported_total", **labels) == task.bytes > 0
        slices = value(after, "egress_slice_duration_seconds_count")
        assert slices is not None and slices > 0
        outcomes = sum(value(after, "egress_slices_total", outcome=o) or 0
                       for o in ("requeued", "done", "retry", "failed", "lost", "cancelled"))
        assert outcomes == slices
        assert value(after, "egress_slices_total", outcome="done") == 1
        claimed = value(after, "egress_claim_duration_seconds_count", result="claimed")
        assert claimed == slices  # one claim per slice
        assert value(after, "egress_lease_losses_total", reason="fenced") == 0

        status, body = get(port, "/healthz")
        assert status == 200, body
        assert set(json.loads(body)["loops"]) == {
            "main", "slot-0", "reconciler", "remote-poller", "webhooks"}
    finally:
        stop(worker, signal.SIGTERM)
    assert worker.returncode == 0


@pytest.mark.postgres
def test_healthz_names_the_loops_stuck_behind_a_locked_table(
    tmp_path: Path, pg_url: str, store_of: list[SqlJobStore]
) -> None:
    settings, _ = setup(tmp_path, pg_url, store_of)
    port = free_port()
    worker = start_worker(settings.home, tmp_path / "worker.log", "--metrics-port", str(port),
                          env_extra={"EGRESS_WORKER_HEALTH_STALE_SECONDS": "2"})
    try:
        assert wait_until(lambda: get(port, "/healthz")[0] == 200, 60), \
            (tmp_path / "worker.log").read_text()
        with psycopg.connect(pg_url) as conn:
            # every claim (and the reconciler's sweep) now waits for the lock, up to the
            # store's lock_timeout (10 s), then tries again
            conn.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
            answers: list[dict] = []

            def stale_slot() -> bool:
                status, body = get(port, "/healthz")
                if status == 503:
                    answers.append(json.loads(body))
                    return any(s["loop"] == "slot-0" for s in answers[-1]["stale"])
                return False

            assert wait_until(stale_slot, 30, every=0.1)
            problem = answers[-1]
            stale = {s["loop"]: s for s in problem["stale"]}
            assert stale["slot-0"]["age_seconds"] > 2
            assert "slot-0" in problem["detail"]
            # the loops that do not read the tasks table keep beating
            assert "webhooks" not in stale and "main" not in stale
            conn.rollback()
        # the lock gone, the loops beat again
        assert wait_until(lambda: get(port, "/healthz")[0] == 200, 30)
        assert get(port, "/readyz")[0] == 200
    finally:
        stop(worker, signal.SIGTERM)
    assert worker.returncode == 0


def test_queue_stats_count_by_state_and_age_the_ready_queue(
    tmp_path: Path, store_url: str, store_of: list[SqlJobStore]
) -> None:
    settings, store = setup(tmp_path, store_url, store_of)
    empty = store.queue_stats()
    assert (empty.exports, empty.tasks, empty.ready, empty.oldest_ready_seconds) == ({}, {}, 0, 0)
    request = ExportRequest(source="main", tables=("events",), format="csv")
    first, _ = create_export(store, settings, request)
    assert wait_until(lambda: store.queue_stats().oldest_ready_seconds > 0.3, 10, every=0.1)
    create_export(store, settings, request)
    stats = store.queue_stats()
    assert stats.exports == {"queued": 2} and stats.tasks == {"queued": 2}
    assert stats.ready == 2 and 0.3 < stats.oldest_ready_seconds < 60
    claimed = store.task_claim("w", lease_seconds=30, project_cap=4, limit=1)
    assert [t.export_id for t in claimed] == [first.id]  # the oldest goes first
    stats = store.queue_stats()
    assert stats.exports == {"queued": 1, "running": 1}
    assert stats.tasks == {"queued": 1, "running": 1} and stats.ready == 1
    assert stats.oldest_ready_seconds < 0.3 + 60


def test_the_api_metrics_have_the_queue_gauges_too(tmp_path: Path,
                                                   store_of: list[SqlJobStore]) -> None:
    import httpx

    from apiharness import LiveServer
    from egress.api.app import create_app

    settings, store = setup(tmp_path, f"sqlite:///{tmp_path / 'store.db'}", store_of)
    create_export(store, settings, ExportRequest(source="main", tables=("events",),
                                                 format="csv"))
    with LiveServer(create_app(settings, store)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        client.get("/healthz")
        text = client.get("/metrics").text
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert value(samples, "egress_tasks", state="queued") == 1
    assert value(samples, "egress_exports", state="queued") == 1
    assert value(samples, "egress_tasks_ready") == 1
    assert value(samples, "egress_api_requests_total", method="GET", route="/healthz",
                 status="200") is not None
