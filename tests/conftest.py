"""Shared fixtures: a real PostgreSQL server for the session, a fresh database per test."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from announce import announce
from jobsharness import kill_leftover_workers
from mariadbserver import MariaDbServer
from pgserver import PgServer, running_server
from s3server import s3, s3_server  # noqa: F401  (fixtures: a moto S3 server, a bucket)

_counter = itertools.count()


@pytest.fixture(autouse=True)
def _no_worker_outlives_its_test() -> Iterator[None]:
    """A worker a failed test left running (it would poll or retry for ever, slowing
    every later test on a small machine) is killed when the test ends."""
    yield
    kill_leftover_workers()


@pytest.fixture(autouse=True)
def _no_worker_probe_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``egress worker`` run in this process (CliRunner) serves no probes on the default
    port 9464, which another test's worker may hold (tests that want it pass a port)."""
    monkeypatch.setenv("EGRESS_WORKER_METRICS_PORT", "0")


@pytest.fixture(scope="session")
def pg_server(pytestconfig: pytest.Config) -> Iterator[PgServer]:
    started = time.monotonic()
    with running_server() as server:
        announce(pytestconfig, f"\nstarted PostgreSQL on 127.0.0.1:{server.port} "
                               f"in {time.monotonic() - started:.1f} s")
        yield server


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """URL of a fresh, empty database on the session's server."""
    return pg_server.create_database(f"t_{next(_counter)}")


@pytest.fixture(scope="session")
def mariadb_server(pytestconfig: pytest.Config) -> Iterator[MariaDbServer]:
    """A MariaDB server for the session, started by the first test that asks for it."""
    from mariadbserver import running_server as running_mariadb

    started = time.monotonic()
    with running_mariadb() as server:
        announce(pytestconfig, f"\nstarted MariaDB on 127.0.0.1:{server.port} "
                               f"in {time.monotonic() - started:.1f} s")
        yield server


@pytest.fixture
def mariadb_url(mariadb_server: MariaDbServer) -> str:
    """URL of a fresh, empty database (utf8mb4) on the session's MariaDB server."""
    return mariadb_server.create_database(f"t_{next(_counter)}")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A job store on each kind: a SQLite file in ``tmp_path``, or a fresh PostgreSQL
    database (the API and store suites override it with migrated templates)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("pg_url")
