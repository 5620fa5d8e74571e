"""Shared fixtures: a real PostgreSQL server for the session, a fresh database per test."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pgserver import PgServer, running_server
from s3server import s3, s3_server  # noqa: F401  (fixtures: a moto S3 server, a bucket)

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with running_server() as server:
        yield server


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """URL of a fresh, empty database on the session's server."""
    return pg_server.create_database(f"t_{next(_counter)}")
