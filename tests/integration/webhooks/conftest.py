"""Webhook tests: a real store (SQLite and PostgreSQL), a real receiver on 127.0.0.1.

Loopback and http receivers are allowed here only through the explicit test settings
``webhooks.allow_loopback`` / ``allow_http``; schedules are made short so retries
happen within the test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webhook_receiver import Receiver, running_receiver
from webhook_support import TEST_WEBHOOKS, MakeSettings

from egress.config import Settings
from egress.store.sql import SqlJobStore


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlJobStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    s = SqlJobStore(url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlJobStore]:
    """SQLite only: for tests about the HTTP side, where the store is not the subject."""
    s = SqlJobStore(f"sqlite:///{tmp_path / 'store.db'}")
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def make_settings(tmp_path: Path) -> MakeSettings:
    def make(**webhooks: Any) -> Settings:
        return Settings(home=tmp_path, store_url="unused",
                        webhooks=dataclasses.replace(TEST_WEBHOOKS, **webhooks))

    return make


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r
