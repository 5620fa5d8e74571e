"""The store conformance suite: every test runs against SQLite and a real PostgreSQL.

Fresh database per test. PostgreSQL copies a migrated template (``CREATE DATABASE …
TEMPLATE``); SQLite copies a migrated file. Both are migrated once per session.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from egress.domain.ids import new_id
from egress.domain.jobs import ExportRecord, ExportState, TaskRecord, TaskState
from egress.store.sql import SqlJobStore
from jobsharness import wait_until
from pgserver import PgServer

_databases = itertools.count()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store-template") / "store.db"
    store = SqlJobStore(f"sqlite:///{path}")
    store.migrate()
    store.close()  # the last connection checkpoints the WAL into the file
    return path


@pytest.fixture(scope="session")
def pg_template(pg_server: PgServer) -> str:
    name = "store_template"
    store = SqlJobStore(pg_server.create_database(name))
    store.migrate()
    store.close()  # a template must have no open connection
    return name


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    server: PgServer = request.getfixturevalue("pg_server")
    template = request.getfixturevalue("pg_template")
    return server.create_database(f"store_{next(_databases)}", template=template)


@pytest.fixture
def store(store_url: str) -> Iterator[SqlJobStore]:
    s = SqlJobStore(store_url)
    yield s
    s.close()


@pytest.fixture
def pass_store_time(store: SqlJobStore) -> Callable[[float], None]:
    """Wait until the store's clock is past ``moment`` (leases and backoff use that clock).

    Tests give leases and delays windows of seconds, so a loaded machine still does the
    calls before the deadline, and wait on the clock instead of sleeping a fixed time.
    """
    def wait(moment: float) -> None:
        assert wait_until(lambda: store.now() > moment, 60, every=0.05), (
            f"store clock never passed {moment}")
    return wait


MakeExport = Callable[..., tuple[ExportRecord, list[TaskRecord]]]


@pytest.fixture
def make_export(store: SqlJobStore) -> MakeExport:
    """Create an export with one task per table; returns (export, tasks)."""

    def make(
        project: str = "p",
        tables: Sequence[str] = ("t1",),
        *,
        key: str | None = None,
        request_hash: str | None = None,
        max_duration: float | None = None,
        callback_url: str | None = None,
        max_attempts: int = 5,
    ) -> tuple[ExportRecord, list[TaskRecord]]:
        record, _ = store.export_create(
            *export_request(project, tables, key=key, request_hash=request_hash,
                            max_duration=max_duration, callback_url=callback_url,
                            max_attempts=max_attempts)
        )
        return record, store.task_list(record.id)

    return make


def export_request(
    project: str = "p",
    tables: Sequence[str] = ("t1",),
    *,
    key: str | None = None,
    request_hash: str | None = None,
    max_duration: float | None = None,
    callback_url: str | None = None,
    max_attempts: int = 5,
) -> tuple[ExportRecord, list[TaskRecord]]:
    export_id = new_id("exp")
    export = ExportRecord(
        id=export_id, project=project, source="main", tables=tuple(tables), format="csv",
        compression="none", destination="local", state=ExportState.QUEUED,
        options={"part_rows": 100}, idempotency_key=key, request_hash=request_hash,
        callback_url=callback_url, max_duration=max_duration,
    )
    tasks = [
        TaskRecord(id=new_id("tsk"), export_id=export_id, project=project, table=t, seq=i,
                   state=TaskState.QUEUED, rows_estimate=1000, max_attempts=max_attempts)
        for i, t in enumerate(tables)
    ]
    return export, tasks


@pytest.fixture(name="export_request")
def export_request_fixture() -> Callable[..., tuple[ExportRecord, list[TaskRecord]]]:
    """Build (export, tasks) records as the use cases do, without storing them."""
    return export_request
