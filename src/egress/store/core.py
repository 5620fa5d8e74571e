"""What every part of SqlJobStore shares: the engine, transactions with retries, the
database clock, and the writes that go with a state change (lease log, outbox).

Each public operation is one transaction whose first statement is the conditional
change itself (``UPDATE … WHERE <condition> RETURNING …``); only if it returns a row do
the companion writes follow, in the same transaction.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from egress.domain.deliveries import completed_files
from egress.domain.ids import new_id
from egress.domain.jobs import ExportState
from egress.exceptions import StoreError
from egress.store.dialect import (
    READ_ONLY,
    is_disconnect,
    is_retryable,
    make_engine,
    normalize_url,
    now_sql,
    token_sql,
)
from egress.store.files import secure_sqlite_files
from egress.store.schema import deliveries, exports, projects, task_events, tasks
from egress.store.writelock import WriteLock

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Attempts of one transaction that hit a serialization failure, a deadlock or SQLite busy.
TX_ATTEMPTS = 8
#: Attempts of a read whose connection dropped (a stale pooled connection, a restart).
READ_RECONNECTS = 3
ACTIVE = (ExportState.QUEUED.value, ExportState.RUNNING.value)
TERMINAL = tuple(s.value for s in ExportState if s.terminal)
#: Exports whose tasks must stop and are never claimed again.
DEAD = (ExportState.CANCELLED.value, ExportState.FAILED.value)


def running_tasks(export_id: Any) -> sa.Exists:
    # a submitted task runs on a remote engine: it is stopped there before outputs go
    return sa.exists().where(tasks.c.export_id == export_id,
                             tasks.c.state.in_(("running", "submitted")))


#: The conditions of a fenced statement, the task and token bound at execution
#: (``p_task``, ``p_token``): it touches the task only while that token holds its lease.
FENCE = (tasks.c.id == sa.bindparam("p_task"), tasks.c.lease_token == sa.bindparam("p_token"),
         tasks.c.state == "running")
# The end of a lease on the lease log. The lease is cleared by then: its holder is on
# the log's claim row. Built once: statements are built and compiled on every call
# otherwise, which cost the workers more client CPU than the database spent on them.
_LOG_END = task_events.insert().values(
    task_id=sa.bindparam("p_task"), export_id=sa.bindparam("p_export"),
    kind=sa.bindparam("p_kind"), lease_token=sa.bindparam("p_token"),
    worker=(sa.select(task_events.c.worker)
            .where(task_events.c.task_id == sa.bindparam("p_task"),
                   task_events.c.lease_token == sa.bindparam("p_token"),
                   task_events.c.kind == "claim")
            .limit(1).scalar_subquery()),
    at=sa.bindparam("p_at", type_=sa.Double),
)


def _close_on_checkin(dbapi_conn: Any, record: Any) -> None:
    # invalidate: closed now, and a later checkout (a store used after close) reconnects
    if dbapi_conn is not None:
        record.invalidate()


class SqlCore:
    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        # SQLite has one writer at a time: the threads and processes of egress queue for
        # it on a lock file instead of in SQLite's busy handler, whose sleeps (1, 2, 5,
        # 10 … ms) were the API's tail latency under concurrent creates (writelock.py).
        self._write_lock: WriteLock | None = None
        parsed = normalize_url(url)
        if parsed.get_backend_name() == "sqlite":
            secure_sqlite_files(Path(str(parsed.database)))  # it holds secrets: 0600
            self._write_lock = WriteLock(Path(f"{parsed.database}-writelock"))
        self._engine = make_engine(url, write_lock=self._write_lock, **engine_kwargs)
        #: the pool ``close`` last disposed, listened to for late check-ins
        self._closed_pool: object | None = None
        self.dialect = self._engine.dialect.name
        self._writer: contextlib.AbstractContextManager[object] = (
            self._write_lock or contextlib.nullcontext()
        )
        self._now = sa.literal_column(now_sql(self.dialect), sa.Double)
        self._token = sa.literal_column(token_sql(self.dialect), sa.String)
        # A dead export stops asking its tasks to stop once none of them runs:
        # cancel_requested False on a cancelled/failed export = its outputs may go.
        self._settle_stmt = (
            sa.update(exports)
            .where(exports.c.id == sa.bindparam("p_export"),
                   exports.c.cancel_requested.is_(True),
                   ~running_tasks(sa.bindparam("p_export")))
            .values(cancel_requested=False, updated_at=self._now)
        )
        self._insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        #: claim statements by (worker, lease seconds, project cap, limit, source limits):
        #: see task_claim
        self._claim_statements: dict[
            tuple[str, float, int, int, tuple[tuple[str, int], ...]], sa.Update] = {}
        # PostgreSQL reads in autocommit: one round trip per statement instead of three
        # (BEGIN, the SELECT, COMMIT); the same answers under READ COMMITTED.
        self._read_options: dict[str, Any] = {READ_ONLY: True}
        if self.dialect == "postgresql":
            self._read_options["isolation_level"] = "AUTOCOMMIT"

    @functools.cached_property
    def _project_insert(self) -> sa.Insert:
        return (self._insert(projects)
                .values(id=sa.bindparam("project"), created_at=self._now)
                .on_conflict_do_nothing(index_elements=["id"]))

    def _ensure_project(self, conn: Connection, project: str) -> None:
        """The project's row, inserted if missing (exports, webhook secrets refer to it)."""
        conn.execute(self._project_insert, {"project": project})

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def _seconds(self, value: float | None) -> sa.ColumnElement[float]:
        """``now + value`` on the database clock (NULL when ``value`` is None)."""
        return self._now + sa.literal(None if value is None else float(value), sa.Double)

    # --- lifecycle ----------------------------------------------------------------------

    def migrate(self) -> None:
        from egress.store.migrations import is_current, upgrade

        try:
            # Every worker migrates at start: a current schema is only read, never
            # waits for a writer.
            if self._tx(is_current, read_only=True):
                return
            # Alembic reads the version once, then commits revision by revision: a
            # second migrator must not start in between (SQLite: the writers' lock file;
            # PostgreSQL: env.py's advisory lock).
            with self._writer:
                upgrade(self._engine)
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"job store migration failed: {exc.orig}") from exc

    def warm_pool(self, connections: int) -> None:
        """Open ``connections`` pooled connections now (the pool keeps up to its size).
        The pool opens them lazily otherwise: an API's burst that first needs one more
        waited for a new PostgreSQL session (a server process, authentication, nothing
        prepared) and showed as a clump of slow answers in the tail latency."""
        held: list[Connection] = []
        try:
            for _ in range(min(connections, self._engine.pool.size())):  # type: ignore[attr-defined]
                held.append(self._engine.connect())
        finally:
            for conn in held:
                conn.close()

    def now(self) -> float:
        return self._tx(lambda c: float(c.execute(sa.select(self._now)).scalar_one()),
                        read_only=True)

    def close(self) -> None:
        """Close the store's connections. One still checked out (a read whose request or
        poller was cancelled while its thread ran on) is closed when it comes back: left
        in the pool that ``dispose`` drops, only the garbage collector closed it."""
        pool = self._engine.pool
        # Not ``sa.event.contains``: its registry is keyed by id(), and a pool that takes
        # the id of a garbage-collected one (stores come and go) looked listened to already.
        if pool is not self._closed_pool:
            sa.event.listen(pool, "checkin", _close_on_checkin)
            self._closed_pool = pool
        self._engine.dispose()
        if self._write_lock is not None:
            self._write_lock.close()

    # --- transactions -------------------------------------------------------------------

    def _tx(
        self,
        fn: Callable[[Connection], T],
        *,
        read_only: bool = False,
        passthrough: tuple[type[Exception], ...] = (),
    ) -> T:
        """Run ``fn`` in one transaction; run it again when the database asks for it.

        A write that lost its connection is not retried: it may have committed, and
        only the caller knows whether doing it again is safe. It raises StoreError
        (transient); the next call gets a fresh connection (the pool drops connections
        the server closed, see ``engine._drop_if_closed_by_server``).
        """
        for attempt in range(1, TX_ATTEMPTS + 1):
            try:
                with (contextlib.nullcontext() if read_only else self._writer), \
                        self._engine.connect() as conn:
                    if read_only:
                        conn.execution_options(**self._read_options)
                    with conn.begin():
                        return fn(conn)
            except passthrough:
                raise
            except sa.exc.DBAPIError as exc:
                retry = is_retryable(exc) or (
                    read_only and is_disconnect(exc) and attempt < READ_RECONNECTS
                )
                if retry and attempt < TX_ATTEMPTS:
                    log.debug("store transaction retried", extra={"attempt": attempt})
                    time.sleep(min(1.0, 0.01 * 2**attempt) * random.uniform(0.5, 1.5))
                    continue
                lines = str(exc.orig).strip().splitlines() if exc.orig else []
                reason = lines[0] if lines else type(exc).__name__
                if is_retryable(exc) or is_disconnect(exc):
                    raise StoreError(f"job store unavailable: {reason}") from exc
                err = StoreError(f"job store refused the operation: {reason}")
                err.transient = False
                raise err from exc
        raise AssertionError("unreachable")

    # --- companion writes ---------------------------------------------------------------

    def _events(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            conn.execute(task_events.insert(), list(rows))

    def _log_end(
        self, conn: Connection, task_id: str, token: str, kind: str, row: sa.Row[Any]
    ) -> None:
        """Log the end of a lease (``row``: the task's export_id and updated_at)."""
        conn.execute(_LOG_END, {"p_task": task_id, "p_token": token, "p_kind": kind,
                                "p_export": row.export_id, "p_at": row.updated_at})

    def _settle(self, conn: Connection, export_id: str) -> None:
        conn.execute(self._settle_stmt, {"p_export": export_id})

    def _back_to_queue(self) -> sa.Case[Any]:
        # A task let go while its export is cancelled or failed is not queued again.
        dead = (sa.exists().where(exports.c.id == tasks.c.export_id,
                                  exports.c.state.in_(DEAD)).correlate(tasks))
        return sa.case((dead, "cancelled"), else_="queued")

    def _fenced(self, task_id: str, token: str) -> sa.Update:
        """An UPDATE that only touches the task while ``token`` holds its lease."""
        return sa.update(tasks).where(
            tasks.c.id == task_id, tasks.c.lease_token == token, tasks.c.state == "running"
        )

    def _end_lease(self, task_id: str, token: str, kind: str, **values: Any) -> bool:
        stmt = (
            sa.update(tasks).where(*FENCE)
            .values(lease_owner=None, lease_token=None, lease_expires_at=None,
                    updated_at=self._now, **values)
            .returning(tasks.c.export_id, tasks.c.state, tasks.c.updated_at)
        )
        return self._end_lease_with(stmt, task_id, token, kind)

    def _end_lease_with(self, stmt: sa.Update, task_id: str, token: str, kind: str) -> bool:
        """End the lease with ``stmt`` (fenced by FENCE, returning the export id, state and
        updated_at), log it and settle the export, in one transaction."""
        params = {"p_task": task_id, "p_token": token}

        def run(conn: Connection) -> bool:
            row = conn.execute(stmt, params).first()
            if row is None:
                return False
            self._log_end(conn, task_id, token, "cancel" if row.state == "cancelled"
                          else kind, row)
            self._settle(conn, row.export_id)
            return True

        return self._tx(run)

    def _cancel_queued(self, conn: Connection, export_id: str) -> None:
        done = conn.execute(
            sa.update(tasks)
            .where(tasks.c.export_id == export_id, tasks.c.state == "queued")
            .values(state="cancelled", updated_at=self._now)
            .returning(tasks.c.id, tasks.c.updated_at)
        ).all()
        self._events(conn, [
            {"task_id": r.id, "export_id": export_id, "kind": "cancel", "lease_token": None,
             "worker": None, "at": r.updated_at}
            for r in done
        ])

    def _outbox(self, conn: Connection, row: sa.Row[Any], event: str) -> None:
        """Queue the export's webhook in the transaction that ends it."""
        if not row.callback_url:
            return
        data: dict[str, Any] = {"id": row.id, "project": row.project, "state": row.state,
                                "error": row.error, "finished_at": row.finished_at}
        if event == "export.completed":
            data["files"] = completed_files(row.id, row.manifest)
        conn.execute(deliveries.insert().values(
            id=new_id("dlv"), export_id=row.id, project=row.project, event_type=event,
            url=row.callback_url, payload={"type": event, "data": data}, state="pending",
            attempts=0, next_attempt_at=self._now, created_at=self._now, updated_at=self._now,
        ))

    def _fail_export(
        self, conn: Connection, export_id: str, error: str, detail: str | None = None
    ) -> bool:
        row = conn.execute(
            sa.update(exports)
            .where(exports.c.id == export_id, exports.c.state.in_(ACTIVE))
            .values(state="failed", error=error, error_detail=detail, finished_at=self._now,
                    updated_at=self._now, cancel_requested=running_tasks(export_id))
            .returning(*exports.c)
        ).first()
        if row is None:
            return False
        self._cancel_queued(conn, export_id)
        self._outbox(conn, row, "export.failed")
        return True

    def _fail_for_table(
        self, conn: Connection, export_id: str, table: str, public: str, detail: str | None
    ) -> None:
        """A task of ``table`` failed: its export fails with the table named, then settles."""
        where = f"table {table!r}: "
        self._fail_export(conn, export_id, where + public,
                          None if detail is None else where + detail)
        self._settle(conn, export_id)
