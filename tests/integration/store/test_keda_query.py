"""The query KEDA scales the workers on (deploy/kubernetes/keda.yaml), run on a real
PostgreSQL store: it counts the work a worker must be there for, and nothing else."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
import yaml

from egress.store.schema import deliveries
from egress.store.sql import SqlJobStore
from pgserver import PgServer

KEDA = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes" / "keda.yaml"
pytestmark = pytest.mark.postgres


def _query() -> str:
    [scaled] = [d for d in yaml.safe_load_all(KEDA.read_text()) if d["kind"] == "ScaledObject"]
    return scaled["spec"]["triggers"][0]["metadata"]["query"]


def _count(url: str) -> int:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        row = conn.execute(_query()).fetchone()
        assert row is not None
        return int(row[0])


def _delivery(store: SqlJobStore, export_id: str, n: int, state: str, due_in: float) -> None:
    now = time.time()
    with store.engine.begin() as conn:  # the test stands in for the webhook outbox
        conn.execute(deliveries.insert().values(
            id=f"dlv_{n:026x}", export_id=export_id, project="p", event_type="export.done",
            url="https://example.com/hook", payload={}, state=state, attempts=0,
            next_attempt_at=now + due_in, created_at=now, updated_at=now))


def test_keda_counts_ready_running_and_submitted_tasks_and_due_deliveries(
    pg_server: PgServer, pg_template: str, export_request
) -> None:
    url = pg_server.create_database("keda", template=pg_template)
    store = SqlJobStore(url)
    try:
        assert _count(url) == 0  # nothing to do: zero replicas
        export, tasks = export_request("p", ("a", "b", "c", "d"))
        store.export_create(export, tasks)
        assert _count(url) == 4  # four ready tasks
        first, second = store.task_claim("w", lease_seconds=60, project_cap=9, limit=2)
        assert _count(url) == 4  # two running, two ready: a worker is still needed
        assert store.task_finish(first.id, first.lease_token)
        assert store.task_requeue(second.id, second.lease_token, delay=3600)
        assert _count(url) == 2  # one done, one waiting an hour for its retry: not counted
        _delivery(store, export.id, 1, "pending", -1.0)
        _delivery(store, export.id, 2, "pending", 3600.0)
        _delivery(store, export.id, 3, "delivered", -1.0)
        assert _count(url) == 3  # one webhook due now
    finally:
        store.close()
