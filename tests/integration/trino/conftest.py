"""Fixtures of the Trino tests: the protocol server, its warehouse, settings, a store."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from egress.config import Settings
from egress.store.sql import SqlJobStore
from jobsharness import write_home
from trino_protocol import TrinoProtocolServer
from trinoharness import Warehouse, fast_remote, rows, trino_url


@pytest.fixture
def trino() -> Iterator[TrinoProtocolServer]:
    with TrinoProtocolServer() as server:
        yield server


@pytest.fixture
def warehouse(trino: TrinoProtocolServer) -> Warehouse:
    wh = Warehouse(trino)
    wh.add("orders", rows(250))
    wh.add("items", rows(40, start=1000))
    return wh


@pytest.fixture
def settings(tmp_path: Path, trino: TrinoProtocolServer, warehouse: Warehouse) -> Settings:
    s = write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 'store.db'}",
                   sources={"wh": trino_url(trino)},
                   worker={"slice_seconds": 2.0, "lease_seconds": 10.0, "poll_seconds": 0.02,
                           "reconcile_seconds": 0.2, "backoff_seconds": 0.05})
    return dataclasses.replace(s, remote=fast_remote())


@pytest.fixture
def store(settings: Settings) -> Iterator[SqlJobStore]:
    s = SqlJobStore(settings.store_url)
    s.migrate()
    yield s
    s.close()
