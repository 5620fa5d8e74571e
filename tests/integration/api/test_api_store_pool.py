"""A burst of requests never makes the API open and close store connections: its
blocking work runs on at most ``api.threads`` threads and the store keeps that many
pooled connections. (A pool smaller than the threads opened "overflow" connections in
every burst and closed them after — on PostgreSQL a server process, an authentication
and lost prepared statements each — which is how a short stall grew into a long one.)"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import sqlalchemy as sa

from apiharness import Api, auth
from egress.store.sql import SqlJobStore

BURST = 120
SENDERS = 48  # more at once than the API's threads (16) and SQLAlchemy's old pool (5 + 10)


def _burst(api: Api, path: str) -> list[int]:
    base = str(api.client.base_url)
    clients = [httpx.Client(base_url=base, timeout=60) for _ in range(SENDERS)]
    try:
        with ThreadPoolExecutor(SENDERS) as pool:
            return list(pool.map(
                lambda i: clients[i % SENDERS].get(path, headers=auth(api.token)).status_code,
                range(BURST)))
    finally:
        for client in clients:
            client.close()


def test_a_burst_of_requests_opens_no_store_connection_once_warm(
    make_api: Any, store: SqlJobStore
) -> None:
    api = make_api(rate_limit_per_second=1e6, rate_limit_burst=1_000_000)
    export_id = api.create()["id"]
    path = f"/v1/exports/{export_id}"
    opened: list[Any] = []
    closed: list[Any] = []
    sa.event.listen(store.engine, "connect", lambda conn, record: opened.append(conn))
    sa.event.listen(store.engine, "close", lambda conn, record: closed.append(conn))
    for _ in range(3):
        assert set(_burst(api, path)) == {200}
    assert closed == []  # none opened for the burst and closed after it
    assert len(opened) <= api.app.state.settings.api.threads
