"""Store URLs, SQLite settings, and what happens when PostgreSQL goes away and comes back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from egress.exceptions import ConfigError, StoreError
from egress.store.dialect import normalize_url
from egress.store.sql import SqlJobStore
from pgserver import free_port, running_server


def test_urls_are_normalized():
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:////tmp/x.db").drivername == "sqlite+pysqlite"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "known: postgresql, sqlite"),
        ("postgresql+asyncpg://u@h/db", "use postgresql://"),
        ("sqlite://", "use sqlite:///PATH"),
        ("not a url", "not a URL"),
    ],
)
def test_unsupported_urls_are_config_errors(url: str, message: str):
    with pytest.raises(ConfigError, match=message):
        SqlJobStore(url)


def test_sqlite_store_uses_wal_and_immediate_writes(tmp_path: Path, export_request):
    store = SqlJobStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        store.migrate()
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
        # A write transaction holds the write lock from its start: a second writer
        # waits instead of failing half way.
        with store.engine.connect() as first:
            first.begin()
            other = sa.create_engine(f"sqlite:///{tmp_path / 'store.db'}",
                                     connect_args={"timeout": 0.1})
            with other.connect() as second, pytest.raises(sa.exc.OperationalError,
                                                         match="locked"):
                second.exec_driver_sql("BEGIN IMMEDIATE")
            other.dispose()
            first.rollback()
    finally:
        store.close()


def test_unreachable_postgres_is_a_transient_store_error():
    store = SqlJobStore(f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    try:
        with pytest.raises(StoreError, match="job store unavailable") as info:
            store.export_get("p", "exp_x")
        assert info.value.transient is True
        with pytest.raises(StoreError):
            store.task_claim("w", lease_seconds=5, project_cap=1)
    finally:
        store.close()


@pytest.mark.postgres
def test_store_reconnects_after_postgres_restarts(export_request):
    with running_server() as server:
        store = SqlJobStore(server.create_database("restart"))
        try:
            store.migrate()
            record, _ = store.export_create(*export_request())
            assert store.export_get("p", record.id) is not None  # pooled connection in use
            server.stop("fast")
            with pytest.raises(StoreError) as info:
                store.task_claim("w", lease_seconds=5, project_cap=1)
            assert info.value.transient is True
            server.start()
            # The pool's dead connections are replaced (pool_pre_ping): no restart needed.
            [task] = store.task_claim("w", lease_seconds=5, project_cap=1)
            assert task.export_id == record.id
            assert store.task_finish(task.id, task.lease_token)
        finally:
            store.close()


@pytest.mark.postgres
def test_serialization_failure_runs_the_transaction_again(pg_url: str):
    store = SqlJobStore(pg_url)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE counter (n integer)")
            conn.exec_driver_sql("INSERT INTO counter VALUES (0)")
        calls = 0

        def bump(conn: sa.Connection) -> int:
            nonlocal calls
            calls += 1
            conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.exec_driver_sql("SELECT n FROM counter").scalar()  # takes the snapshot
            if calls == 1:  # another transaction changes the row after our snapshot
                with store.engine.begin() as other:
                    other.exec_driver_sql("UPDATE counter SET n = n + 1")
            conn.exec_driver_sql("UPDATE counter SET n = n + 10")
            return calls

        assert store._tx(bump) == 2  # 40001 on the first run, success on the second
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT n FROM counter").scalar() == 11
    finally:
        store.close()


@pytest.mark.postgres
def test_a_transaction_the_server_ended_while_this_process_stalled_runs_again(pg_url: str):
    # The store's sessions end a transaction idle for PG_IDLE_IN_TRANSACTION_MS (so that a
    # frozen worker holds no lock for ever); the server rolls it back before it closes the
    # session, so the store runs it again on a new connection instead of failing.
    store = SqlJobStore(pg_url)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE stalled (n integer)")
        pids: list[int] = []

        def insert(conn: sa.Connection) -> int:
            pids.append(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
            conn.exec_driver_sql("INSERT INTO stalled VALUES (1)")
            if len(pids) == 1:  # the first run stalls past a (shortened) idle limit
                conn.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = 100")
                time.sleep(1.0)
            conn.exec_driver_sql("INSERT INTO stalled VALUES (2)")
            return len(pids)

        assert store._tx(insert) == 2
        assert pids[0] != pids[1]  # the ended session was not reused
        with store.engine.connect() as conn:  # the first run's insert was rolled back
            assert conn.exec_driver_sql("SELECT n FROM stalled ORDER BY n").scalars().all() \
                == [1, 2]
    finally:
        store.close()


@pytest.mark.postgres
def test_a_pooled_connection_the_server_ended_is_replaced_at_checkout(pg_url: str,
                                                                      export_request):
    # No round trip per checkout (no pool_pre_ping): the pool sees the server's goodbye
    # on the idle socket and connects anew, so even a write succeeds at the first try.
    store = SqlJobStore(pg_url, pool_size=1, max_overflow=0)
    try:
        store.migrate()
        record, _ = store.export_create(*export_request())
        pid = store._tx(lambda c: c.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        admin = sa.create_engine(pg_url, poolclass=sa.NullPool)
        with admin.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
            deadline = time.monotonic() + 10
            while conn.exec_driver_sql(  # the backend has gone: its socket is closed
                    f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(pid)}"
            ).scalar_one() and time.monotonic() < deadline:
                time.sleep(0.02)
        admin.dispose()
        [task] = store.task_claim("w", lease_seconds=5, project_cap=1)
        assert task.export_id == record.id
        new_pid = store._tx(lambda c: c.exec_driver_sql("SELECT pg_backend_pid()")
                            .scalar_one())
        assert new_pid != pid
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_reads_run_in_autocommit_and_writes_stay_atomic(pg_url: str):
    store = SqlJobStore(pg_url, pool_size=1, max_overflow=0)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE things (n integer)")
        # a read: no BEGIN/COMMIT round trips
        assert store._tx(lambda c: c.connection.dbapi_connection.autocommit,  # type: ignore[union-attr]
                         read_only=True) is True

        # the same pooled connection, now for a write: one transaction again
        def half_done(conn: sa.Connection) -> None:
            assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
            conn.exec_driver_sql("INSERT INTO things VALUES (1)")
            raise RuntimeError("fails half way")

        with pytest.raises(RuntimeError):
            store._tx(half_done)
        assert store._tx(lambda c: c.exec_driver_sql("SELECT count(*) FROM things")
                         .scalar_one(), read_only=True) == 0
    finally:
        store.close()


@pytest.mark.postgres
def test_an_api_opens_its_store_connections_before_the_first_request(
    tmp_path: Path, pg_server
) -> None:
    """A burst that needs one more connection than the pool holds would wait for a new
    PostgreSQL session: the API opens ``WARM_CONNECTIONS`` at start."""
    import asyncio

    from egress.api.app import WARM_CONNECTIONS, create_app
    from egress.config import load_settings

    url = pg_server.create_database("warm_pool")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "egress.toml").write_text(f'[store]\nurl = "{url}"\n[api]\nthreads = 12\n')
    settings = load_settings(home, env={})
    plain = url.replace("postgresql+psycopg", "postgresql")

    def sessions() -> int:
        import psycopg

        with psycopg.connect(plain) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                               "current_database() AND pid <> pg_backend_pid()").fetchone()
        return int(row[0]) if row else 0

    app = create_app(settings)

    async def started() -> tuple[int, int]:
        async with app.router.lifespan_context(app):
            return app.state.store.engine.pool.checkedin(), sessions()

    pooled, live = asyncio.run(started())
    # (live: a session closed just before, by the migration, may not have left yet)
    assert pooled == WARM_CONNECTIONS and live >= WARM_CONNECTIONS
    # closed with the app (a backend leaves pg_stat_activity a moment after its client)
    deadline = time.monotonic() + 20
    while sessions() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sessions() == 0


def test_warming_never_opens_more_than_the_pool_keeps(tmp_path: Path) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'store.db'}", pool_size=3)
    try:
        store.warm_pool(10)
        assert store.engine.pool.checkedin() == 3
    finally:
        store.close()


def test_a_connection_still_in_use_at_close_is_closed_when_it_comes_back(
        store: SqlJobStore) -> None:
    # A read left running by a cancelled request or poller gives its connection back
    # after close(): it is closed then, not left for the garbage collector.
    conn = store.engine.connect()
    raw = conn.connection.dbapi_connection
    conn.execute(sa.text("SELECT 1"))
    store.close()
    assert not _closed(raw)  # still in use: close() leaves it alone
    conn.close()
    assert _closed(raw)
    assert store.now() > 0  # a store used after close connects anew


def test_every_store_closes_its_late_connections(store_url: str) -> None:
    # Stores come and go (tests, API processes, CLI commands): a store whose pool took
    # the id() of a closed store's pool once looked listened to already, and its late
    # connection stayed open (sqlalchemy's event registry is keyed by id; 17 in 300).
    left_open = []
    for i in range(150):
        store = SqlJobStore(store_url)
        conn = store.engine.connect()
        raw = conn.connection.dbapi_connection
        store.close()
        conn.close()
        if not _closed(raw):
            left_open.append(i)
            raw.close()  # type: ignore[union-attr]
    assert left_open == []


def _closed(dbapi_conn: object) -> bool:
    if hasattr(dbapi_conn, "broken"):  # psycopg
        return bool(dbapi_conn.closed)  # type: ignore[attr-defined]
    try:  # sqlite3 has no flag: a closed connection refuses to work
        dbapi_conn.execute("SELECT 1")  # type: ignore[attr-defined]
    except Exception:
        return True
    return False
