"""Which errors a worker retries: classified by the drivers' own classes and SQLSTATEs,
with real errors from real servers — PostgreSQL (psycopg and ADBC), SQLite, an S3 server
and the network — and, through a real worker, the attempts, the backoff between them and
the give-up at ``max_attempts`` for a source that is down, against a permanent error that
fails at once."""

from __future__ import annotations

import contextlib
import errno
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import adbc_driver_postgresql.dbapi as adbc_pg
import boto3
import psycopg
import pytest
from botocore.config import Config

from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from egress.worker.retry import is_transient
from jobsharness import write_home
from pgserver import PgServer, free_port, running_server
from s3server import S3Bucket


def _raised(action: Callable[[], object]) -> BaseException:
    try:
        action()
    except BaseException as exc:
        return exc
    raise AssertionError("no error raised")


def _sql(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def test_postgresql_errors_are_classified_by_sqlstate(pg_url: str, pg_server: PgServer) -> None:
    _sql(pg_url, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)",
         "CREATE ROLE nobody LOGIN")
    permanent = {
        "42601 syntax error": lambda: _sql(pg_url, "SELEC 1"),
        "42P01 undefined table": lambda: _sql(pg_url, "SELECT * FROM missing"),
        "42703 undefined column": lambda: _sql(pg_url, "SELECT nope FROM t"),
        "22012 division by zero": lambda: _sql(pg_url, "SELECT 1 / 0"),
        "42501 permission denied": lambda: _sql(
            pg_url.replace("postgres@", "nobody@"), "SELECT * FROM t"),
    }
    for name, action in permanent.items():
        exc = _raised(action)
        assert isinstance(exc, psycopg.Error) and not is_transient(exc), (name, exc)

    # 57014: a statement timeout
    exc = _raised(lambda: _sql(pg_url, "SET statement_timeout = 50", "SELECT pg_sleep(2)"))
    assert exc.sqlstate == "57014" and is_transient(exc)
    # 55P03: lock not available
    with psycopg.connect(pg_url) as holder:
        holder.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        exc = _raised(lambda: _sql(pg_url, "SET lock_timeout = 50", "SELECT * FROM t"))
        assert exc.sqlstate == "55P03" and is_transient(exc)
    # 40001: a serialization failure between two SERIALIZABLE transactions
    with psycopg.connect(pg_url) as a, psycopg.connect(pg_url) as b:
        for conn in (a, b):
            conn.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            conn.execute("SELECT sum(id) FROM t")
        a.execute("INSERT INTO t VALUES (10)")
        b.execute("INSERT INTO t VALUES (20)")
        a.commit()
        exc = _raised(b.commit)
        assert exc.sqlstate == "40001" and is_transient(exc)
    # 57P01: the server terminates the session (as on a restart or failover)
    with psycopg.connect(pg_url, autocommit=True) as victim:
        pid = victim.info.backend_pid
        _sql(pg_server.url, f"SELECT pg_terminate_backend({pid})")
        exc = _raised(lambda: victim.execute("SELECT 1"))
        assert isinstance(exc, psycopg.OperationalError) and is_transient(exc), exc
    # nothing listening: no SQLSTATE, a connection failure
    exc = _raised(lambda: psycopg.connect(f"postgresql://postgres@127.0.0.1:{free_port()}/x"))
    assert exc.sqlstate is None and is_transient(exc)
    # the ADBC driver carries the SQLSTATE too
    with adbc_pg.connect(pg_url) as conn, contextlib.closing(conn.cursor()) as cur:
        exc = _raised(lambda: cur.execute("SELEC 1"))
        assert getattr(exc, "sqlstate", None) == "42601" and not is_transient(exc)


def test_sqlite_s3_and_network_errors(tmp_path: Path, s3: S3Bucket) -> None:
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0)
    locked = _raised(lambda: other.execute("SELECT * FROM t"))
    assert isinstance(locked, sqlite3.OperationalError) and is_transient(locked)
    holder.execute("ROLLBACK")
    missing = _raised(lambda: other.execute("SELECT * FROM nowhere"))
    assert isinstance(missing, sqlite3.OperationalError) and not is_transient(missing)

    client = s3.client
    no_bucket = _raised(lambda: client.get_object(Bucket="no-such-bucket", Key="x"))
    assert not is_transient(no_bucket)
    unreachable = boto3.client(
        "s3", endpoint_url=f"http://127.0.0.1:{free_port()}",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    refused = _raised(lambda: unreachable.list_buckets())
    assert is_transient(refused), refused

    assert is_transient(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert is_transient(OSError(errno.EHOSTUNREACH, "no route"))
    assert not is_transient(FileNotFoundError(errno.ENOENT, "gone"))
    for bug in (ValueError("x"), KeyError("x"), RuntimeError("x"), OverflowError("x")):
        assert not is_transient(bug)


def _worker_settings(tmp_path: Path, source_url: str, store_url: str):
    return write_home(tmp_path / "home", store_url=store_url, sources={"main": source_url},
                      worker={"max_attempts": 3, "backoff_seconds": 0.4,
                              "backoff_max_seconds": 5.0, "poll_seconds": 0.05,
                              "reconcile_seconds": 0.2, "heartbeat_seconds": 0.5,
                              "lease_seconds": 5.0, "concurrency": 1})


def _run_worker(store: SqlJobStore, settings, timeout: float = 60.0) -> None:
    worker = Worker(store, settings)
    thread = threading.Thread(target=worker.run, kwargs={"exit_when_idle": True})
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stopping.set()
        thread.join(10)
        raise AssertionError("the worker did not finish in time")


def test_a_source_that_stays_down_is_retried_with_backoff_then_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_server() as source_server:
        source_url = source_server.create_database("down")
        _sql(source_url, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1)")
        settings = _worker_settings(tmp_path, source_url, f"sqlite:///{tmp_path / 's.db'}")
        store = SqlJobStore(settings.store_url)
        store.migrate()
        try:
            export, _ = create_export(store, settings, ExportRequest(source="main",
                                                                     tables=("t",)),
                                      project="p")
            source_server.stop()
            with caplog.at_level(logging.WARNING, logger="egress.worker.runner"):
                _run_worker(store, settings)
            failed = store.export_get("p", export.id)
            [task] = store.task_list(export.id)
        finally:
            store.close()
            with contextlib.suppress(Exception):
                source_server.start()
    assert failed is not None and failed.state is ExportState.FAILED
    assert task.attempts == 3 and "could not be reached" in (task.error or "")
    assert "cannot reach PostgreSQL" in (failed.error_detail or "")  # the cause, named
    delays = [r.delay for r in caplog.records if r.getMessage() == "slice failed; will retry"]
    assert len(delays) == 2  # attempts 1 and 2 retried, the 3rd gives up
    for n, delay in enumerate(delays, start=1):  # exponential, with jitter in [½, 1]
        assert 0.4 * 2 ** (n - 1) / 2 <= delay <= 0.4 * 2 ** (n - 1), delays


def test_a_permanent_error_fails_at_once(tmp_path: Path, pg_url: str) -> None:
    _sql(pg_url, "CREATE TABLE t (id int PRIMARY KEY)",
         "INSERT INTO t SELECT generate_series(1, 50)")
    settings = _worker_settings(tmp_path, pg_url, f"sqlite:///{tmp_path / 's.db'}")
    store = SqlJobStore(settings.store_url)
    store.migrate()
    try:
        # valid when checked, failing when its rows are read: 22012 division by zero
        query = {"sql": "SELECT id, 10 / (id - 3) AS x FROM t", "key": ["id"], "name": "q"}
        export, _ = create_export(store, settings, ExportRequest(
            source="main", options={"query": query}), project="p")
        _run_worker(store, settings)
        failed = store.export_get("p", export.id)
        [task] = store.task_list(export.id)
    finally:
        store.close()
    assert failed is not None and failed.state is ExportState.FAILED
    assert task.attempts == 1 and "division by zero" in (task.error or "")
