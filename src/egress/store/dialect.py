"""The job store per dialect: engines, the few per-dialect SQL fragments, error translation.

SQLite: WAL (readers never block the writer), a busy timeout, foreign keys on, and every
write transaction opened with ``BEGIN IMMEDIATE`` so a transaction takes the write lock
up front instead of failing to upgrade a read lock half way (SQLAlchemy's documented
pysqlite recipe: turn off the driver's own BEGIN, emit ours in the ``begin`` event).
Several processes can share one file this way.

PostgreSQL: psycopg 3, READ COMMITTED (conditional UPDATEs re-check their WHERE on the
newest row version, which is all the store needs). A pooled connection that the server
closed (a restart, a terminated backend) is replaced when it is checked out: an idle
connection has nothing to read, so a readable socket means the server ended it. That
check is a ``poll()`` of the socket, not ``pool_pre_ping``'s round trip per checkout
(``SELECT 1``: a tenth of the API's CPU on a PostgreSQL store). Reads run in
autocommit (see ``READ_ONLY``).
"""

from __future__ import annotations

import contextlib
import select
import sqlite3
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url

from egress.exceptions import ConfigError

#: Execution option on a Connection: open its transaction read-only (SQLite: plain BEGIN;
#: PostgreSQL: autocommit, no BEGIN/COMMIT round trips — under READ COMMITTED every
#: statement takes its own snapshot anyway, so a read transaction adds no consistency).
READ_ONLY = "egress_read_only"

SQLITE_BUSY_TIMEOUT_S = 30.0

# SQLSTATEs after which the whole transaction can simply run again. 25P03: the server
# ended a session idle inside a transaction for PG_IDLE_IN_TRANSACTION_MS (this process
# stalled: a paused VM, a disk that blocked a page fault) and rolled the transaction back
# first; the pool replaces the connection it closed.
_RETRY_SQLSTATES = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "25P03",  # idle_in_transaction_session_timeout
}


def normalize_url(url: str) -> sa.URL:
    """Accept ``postgresql://``/``postgres://`` (use psycopg 3) and ``sqlite:///path``."""
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except sa.exc.ArgumentError as exc:
        raise ConfigError(
            "store url is not a URL; use sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from exc
    if parsed.get_backend_name() == "postgresql":
        if parsed.get_driver_name() not in ("psycopg", "postgresql"):
            raise ConfigError(
                f"store driver {parsed.drivername!r} is not supported; "
                "use postgresql:// (psycopg 3)"
            )
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ConfigError(
                "an in-memory SQLite store would vanish with its connection; "
                "use sqlite:///PATH to a file"
            )
        return parsed.set(drivername="sqlite+pysqlite")
    raise ConfigError(
        f"store backend {parsed.get_backend_name()!r} is not supported; "
        "known: postgresql, sqlite"
    )


#: Store transactions take milliseconds; a session idle inside one this long is frozen.
PG_IDLE_IN_TRANSACTION_MS = 5000
PG_LOCK_TIMEOUT_MS = 10000


#: Connections a store keeps open once it has needed them (SQLAlchemy's default is 5).
#: A pool smaller than the threads that use it at once opens "overflow" connections in a
#: burst and closes them right after: on PostgreSQL each costs a server process, an
#: authentication and psycopg's prepared statements, so a burst made the next one slower
#: and the API's queue fed itself (docs/benchmarks.md, issue 17). Connections are opened
#: lazily: a worker that needs three keeps three.
POOL_SIZE = 24
#: Beyond the pool, connections opened for a moment (then closed) instead of waiting.
POOL_OVERFLOW = 16


def make_engine(
    url: str, *, write_lock: contextlib.AbstractContextManager[object] | None = None,
    **kwargs: Any,
) -> Engine:
    """``write_lock`` (SQLite): the lock the store's writers share; a new database file
    is switched to WAL under it."""
    parsed = normalize_url(url)
    kwargs.setdefault("pool_size", POOL_SIZE)  # (an in-memory SQLite store is refused above)
    kwargs.setdefault("max_overflow", POOL_OVERFLOW)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, **kwargs
        )
        _sqlite_hooks(engine, write_lock or contextlib.nullcontext())
        return engine
    # A worker frozen mid-transaction (SIGSTOP, a long GC pause, a lost VM) would hold
    # its row locks for ever and block every claim of that task: the server ends such
    # sessions, and nobody waits on a lock for long.
    options = (
        f"-c idle_in_transaction_session_timeout={PG_IDLE_IN_TRANSACTION_MS} "
        f"-c lock_timeout={PG_LOCK_TIMEOUT_MS}"
    )
    engine = sa.create_engine(
        parsed, connect_args={"options": options, "connect_timeout": 10}, **kwargs,
    )
    event.listen(engine, "checkout", _drop_if_closed_by_server)
    return engine


def _drop_if_closed_by_server(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
    """Refuse a pooled PostgreSQL connection that the server has closed; the pool then
    connects anew (DisconnectionError at checkout is SQLAlchemy's documented signal).

    Between transactions the server sends nothing (the store uses no LISTEN), so data or
    EOF waiting on the socket is the server's goodbye: a restart's or an administrator's
    FATAL message and the close."""
    import psycopg  # only PostgreSQL engines get here

    try:
        if dbapi_conn.closed or dbapi_conn.broken:
            raise sa.exc.DisconnectionError("connection closed")
        poller = select.poll()
        poller.register(dbapi_conn.pgconn.socket, select.POLLIN | select.POLLERR
                        | select.POLLHUP)
        ready = poller.poll(0)
    except (OSError, psycopg.Error) as exc:
        raise sa.exc.DisconnectionError(str(exc)) from exc
    if ready:
        raise sa.exc.DisconnectionError("the server closed the connection")


def _sqlite_hooks(engine: Engine, write_lock: contextlib.AbstractContextManager[object]
                  ) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        # The driver must not open transactions itself; the "begin" hook below does.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        # WAL is a property of the file: set once, by the first connection. Switching
        # answers "database is locked" at once (no busy wait) while another process
        # switches too, so processes that open a new store together take turns; a
        # connection to a store in WAL already only reads the mode and waits for none.
        if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            with write_lock:
                cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        # Durable across process crashes; a power loss may drop the newest commits,
        # which the checkpoint protocol survives (a part is redone).
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def now_sql(dialect: str) -> str:
    """The database clock as seconds since the epoch (double precision).

    PostgreSQL: ``statement_timestamp()`` rather than ``clock_timestamp()``: one value
    for the whole statement (as SQLite's 'now' is), and stable, so it can bound an
    index scan; ``now()`` would be the start of the transaction.
    """
    if dialect == "postgresql":
        return "(extract(epoch from statement_timestamp())::double precision)"
    return "((julianday('now') - 2440587.5) * 86400.0)"


def token_sql(dialect: str) -> str:
    """A new random lease token per row (32 hex digits)."""
    if dialect == "postgresql":
        return "replace(gen_random_uuid()::text, '-', '')"
    return "lower(hex(randomblob(16)))"


def sqlstate(exc: sa.exc.DBAPIError) -> str | None:
    return getattr(exc.orig, "sqlstate", None)


def is_retryable(exc: sa.exc.DBAPIError) -> bool:
    """The transaction was rolled back and running it again is safe and may succeed."""
    if sqlstate(exc) in _RETRY_SQLSTATES:
        return True
    # SQLite: the busy timeout ran out while another process held the write lock.
    text = str(exc.orig).lower()
    return "database is locked" in text or "database is busy" in text


def is_disconnect(exc: sa.exc.DBAPIError) -> bool:
    """The database could not be reached or dropped the connection (transient)."""
    if exc.connection_invalidated or isinstance(exc, sa.exc.InterfaceError):
        return True
    if not isinstance(exc, sa.exc.OperationalError):
        return False
    if isinstance(exc.orig, sqlite3.Error):
        # pysqlite also raises OperationalError for SQL errors ("no such table").
        text = str(exc.orig).lower()
        return any(s in text for s in ("unable to open", "disk i/o", "locked", "busy"))
    return True  # psycopg: connection refused/reset, server shutting down, timeouts
