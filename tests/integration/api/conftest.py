"""The HTTP API against real stores (SQLite and PostgreSQL), a real SQLite source and the
local sink, driven by httpx (Starlette's TestClient is an httpx client on the ASGI app).

Tokens for two projects: ``alpha`` (one per scope, plus admin) and ``beta`` (admin).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from apiharness import Api, LiveServer, Tokens, make_settings
from egress.config import Settings
from egress.store.sql import SqlJobStore
from egress.web import create_site
from jobsharness import make_events_db
from pgserver import PgServer

_databases = itertools.count()
EVENTS_ROWS = 2500


@pytest.fixture(scope="session")
def source_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api-source") / "shop.db"
    make_events_db(path, {"events": EVENTS_ROWS, "users": 40})
    return path


@pytest.fixture(scope="session")
def api_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api-store") / "store.db"
    store = SqlJobStore(f"sqlite:///{path}")
    store.migrate()
    store.close()
    return path


@pytest.fixture(scope="session")
def api_pg_template(pg_server: PgServer) -> str:
    name = "api_template"
    store = SqlJobStore(pg_server.create_database(name))
    store.migrate()
    store.close()
    return name


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        shutil.copyfile(request.getfixturevalue("api_sqlite_template"), path)
        return f"sqlite:///{path}"
    server: PgServer = request.getfixturevalue("pg_server")
    template = request.getfixturevalue("api_pg_template")
    return server.create_database(f"api_{next(_databases)}", template=template)


@pytest.fixture
def sqlite_store_url(tmp_path: Path, api_sqlite_template: Path) -> str:
    """SQLite only: for tests whose subject is the HTTP layer, not the store."""
    path = tmp_path / "store.db"
    shutil.copyfile(api_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def settings(tmp_path: Path, store_url: str, source_db: Path) -> Settings:
    return make_settings(tmp_path / "home", store_url, source_db)


@pytest.fixture
def store(settings: Settings) -> Iterator[SqlJobStore]:
    s = SqlJobStore(settings.store_url)
    yield s
    s.close()


@pytest.fixture
def tokens(store: SqlJobStore) -> Tokens:
    t = Tokens(store)
    t.make("alpha", "admin", label="alpha")
    for scope in ("exports:read", "exports:create", "exports:cancel", "exports:query"):
        t.make("alpha", scope, label=scope)
    t.make("beta", "admin", label="beta")
    return t


AppFactory = Callable[..., Api]


@pytest.fixture
def make_api(settings: Settings, store: SqlJobStore, tokens: Tokens) -> Iterator[AppFactory]:
    """``make_api(run_worker=False, **api_settings)``: the app served on 127.0.0.1 and an
    httpx client for it (alpha's admin token by default)."""
    with contextlib.ExitStack() as stack:

        def make(run_worker: bool = False, **api: Any) -> Api:
            s = replace(settings, api=replace(settings.api, **api)) if api else settings
            app = create_site(s, store, run_worker=run_worker)
            server = stack.enter_context(LiveServer(app))
            client = stack.enter_context(httpx.Client(base_url=server.url, timeout=30))
            return Api(client, tokens["alpha"], app)

        yield make


@pytest.fixture
def api(make_api: AppFactory) -> Api:
    return make_api()


@pytest.fixture
def api_worker(make_api: AppFactory) -> Api:
    """The API with an embedded worker: exports run to completion."""
    return make_api(run_worker=True)


