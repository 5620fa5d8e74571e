"""Export operations of SqlJobStore: create (idempotent), read, cancel, fail, retry, delete."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from egress.domain.access import AuditEntry
from egress.domain.ids import new_id
from egress.domain.jobs import ExportRecord, ExportState, TaskRecord
from egress.exceptions import (
    ActiveLimitError,
    ConfigError,
    IdempotencyConflictError,
    StoreError,
)
from egress.failures import public_and_detail
from egress.store import records
from egress.store.core import ACTIVE, DEAD, TERMINAL, SqlCore, running_tasks
from egress.store.schema import audit_log, exports, projects
from egress.store.schema import tasks as task_table
from egress.store.sql_audit import audit_insert, audit_values


def _not_done(export_id: Any) -> sa.Exists:
    return sa.exists().where(task_table.c.export_id == export_id, task_table.c.state != "done")


def _count_active(project: Any, limit: Any) -> sa.Select[Any]:
    active = sa.select(sa.literal(1)).where(exports.c.state.in_(ACTIVE))
    if project is not None:
        active = active.where(exports.c.project == project)
    if limit is not None:  # stop counting there: a cap check needs no more
        active = active.limit(limit)
    return sa.select(sa.func.count()).select_from(active.subquery())


#: A project's active exports, counted up to a cap (values bound at execution).
_COUNT_ACTIVE_UP_TO = _count_active(sa.bindparam("project"), sa.bindparam("cap", type_=sa.Integer))
#: One export by id, and by id within a project.
_EXPORT_BY_ID = sa.select(exports).where(exports.c.id == sa.bindparam("export_id"))
_EXPORT_IN_PROJECT = _EXPORT_BY_ID.where(exports.c.project == sa.bindparam("project"))
#: A project's row, locked until commit (PostgreSQL; KEY SHARE checks still pass).
_LOCK_PROJECT = (sa.select(projects.c.id).where(projects.c.id == sa.bindparam("project"))
                 .with_for_update(key_share=True))


#: Most tasks a create inserts in the export's own statement (more: one statement each).
MAX_TASKS_IN_ONE_INSERT = 8


def _insert_from_params(table: sa.Table, prefix: str, columns: Sequence[str],
                        **computed: sa.ColumnElement[Any]) -> sa.Insert:
    """``INSERT INTO table (columns…) SELECT :prefix_column…, computed…``: only these
    columns (a VALUES insert in a CTE would list the serial key too)."""
    picked = [sa.bindparam(prefix + c, type_=table.c[c].type) for c in columns]
    return table.insert().from_select(
        [*columns, *computed], sa.select(*picked, *(v.label(k) for k, v in computed.items())))


class ExportOps(SqlCore):
    # Statements built once, their values bound at execution: building an INSERT with
    # ``.values(**row)`` coerced every value into a bind parameter on every call, more
    # CPU than running it (issue 17).
    @functools.cached_property
    def _export_insert(self) -> sa.Insert:
        return exports.insert().values(
            created_at=self._now, updated_at=self._now,
            deadline_at=self._now + sa.bindparam("deadline_seconds", type_=sa.Double),
        ).returning(*exports.c)

    @functools.cached_property
    def _create_audit_insert(self) -> sa.Insert:
        return audit_insert(self._now)

    @functools.cached_property
    def _task_insert(self) -> sa.Insert:
        return task_table.insert().values(run_after=self._now, created_at=self._now,
                                          updated_at=self._now)

    def export_create(
        self, export: ExportRecord, tasks: Sequence[TaskRecord], *,
        active_cap: int | None = None, audit: AuditEntry | None = None,
    ) -> tuple[ExportRecord, bool]:
        if active_cap is not None and active_cap < 1:
            raise ConfigError(f"active export cap must be at least 1, got {active_cap}")
        export_id = export.id or new_id("exp")
        by_key = sa.select(exports).where(
            exports.c.project == export.project,
            exports.c.idempotency_key == export.idempotency_key,
        )

        def run(conn: Connection) -> tuple[ExportRecord, bool]:
            if export.idempotency_key is not None:
                # (a concurrent create with the same key meets the unique index: below)
                found = conn.execute(by_key).first()
                if found is not None:
                    return self._replay(found, export), False
            if export.project not in self._projects_stored:
                self._ensure_project(conn, export.project)
            values = {**records.export_values(export, export_id),
                      "deadline_seconds": export.max_duration}
            task_rows = [records.task_values(t, t.id or new_id("tsk"), export, export_id)
                         for t in tasks]
            audit_row = audit_values(audit) if audit is not None else None
            if self.dialect == "postgresql" and len(task_rows) <= MAX_TASKS_IN_ONE_INSERT:
                # one statement, one round trip: the foreign keys are checked at its end
                statement, params = self._insert_all(values, task_rows, audit_row)
                row = conn.execute(statement, params).one()
            else:
                row = self._insert_each(conn, values, task_rows, audit_row)
            if active_cap is not None:
                # last, so that the project is locked only for the count and the commit
                self._lock_project(conn, export.project)
                self._check_active_cap(conn, export.project, active_cap)
            return records.export_record(row), True

        try:
            try:
                created = self._tx(run, passthrough=(sa.exc.IntegrityError,))
            except sa.exc.IntegrityError:
                if export.project not in self._projects_stored:
                    raise
                # its row is gone (a store restored from an older copy): insert it again
                self._projects_stored.discard(export.project)
                created = self._tx(run, passthrough=(sa.exc.IntegrityError,))
            self._projects_stored.add(export.project)
            return created
        except sa.exc.IntegrityError as exc:
            # A concurrent create with the same key committed first: answer with it.
            found = None
            if export.idempotency_key is not None:
                found = self._tx(lambda c: c.execute(by_key).first(), read_only=True)
            if found is None:
                err = StoreError(f"export {export_id} could not be stored: {exc.orig}")
                err.transient = False
                raise err from exc
            return self._replay(found, export), False

    def _insert_each(self, conn: Connection, values: dict[str, Any],
                     task_rows: list[dict[str, Any]], audit_row: dict[str, Any] | None,
                     ) -> sa.Row[Any]:
        row = conn.execute(self._export_insert, values).one()
        if task_rows:
            conn.execute(self._task_insert, task_rows)
        if audit_row is not None:  # in the same transaction: one commit per create
            conn.execute(self._create_audit_insert, audit_row)
        return row

    def _insert_all(self, values: dict[str, Any], task_rows: list[dict[str, Any]],
                    audit_row: dict[str, Any] | None) -> tuple[sa.Insert, dict[str, Any]]:
        """The export, its tasks and its audit entry as one INSERT (PostgreSQL: the
        tasks and the entry in data-modifying CTEs), and its parameters. Each round trip
        of a create waited for the server and then for the GIL under load (issue 17)."""
        shape = (len(task_rows), tuple(task_rows[0]) if task_rows else (),
                 tuple(audit_row) if audit_row is not None else None)
        statement = self._insert_all_statements.get(shape)
        if statement is None:
            ctes = [_insert_from_params(task_table, f"t{i}_", shape[1], run_after=self._now,
                                        created_at=self._now, updated_at=self._now
                                        ).cte(f"new_task_{i}")
                    for i in range(shape[0])]
            if shape[2] is not None:
                ctes.append(_insert_from_params(audit_log, "a_", shape[2], at=self._now
                                                ).cte("new_audit"))
            statement = self._export_insert.add_cte(*ctes)
            self._insert_all_statements[shape] = statement
        params = dict(values)
        for i, task_row in enumerate(task_rows):
            params.update((f"t{i}_{k}", v) for k, v in task_row.items())
        if audit_row is not None:
            params.update((f"a_{k}", v) for k, v in audit_row.items())
        return statement, params

    @functools.cached_property
    def _insert_all_statements(self) -> dict[tuple[Any, ...], sa.Insert]:
        return {}

    @functools.cached_property
    def _projects_stored(self) -> set[str]:
        """Projects whose row this store saw committed: a create skips their insert (a
        round trip to PostgreSQL on every create otherwise). Rows of projects are never
        deleted."""
        return set()

    def _lock_project(self, conn: Connection, project: str) -> None:
        """Hold the project's row until commit, so that the creates of a project count
        its active exports one after the other.

        Taken after the new export is inserted: the row is held only for the count and
        the commit. Taken first, it was held across every statement of the create —
        and a create whose API thread waited for the CPU held up all the project's
        creates behind it (PostgreSQL showed them waiting on ``Lock: tuple`` while the
        holder sat ``idle in transaction``; docs/benchmarks.md, issue 17). The count runs
        after the lock is granted, so under READ COMMITTED it sees every create that
        committed before, and its own insert.

        SQLite needs no row lock: its write transactions run one at a time (BEGIN
        IMMEDIATE, behind the write-lock file). PostgreSQL: ``FOR NO KEY UPDATE``
        queues the project's creates and lets foreign-key checks (KEY SHARE) pass.
        """
        if self.dialect == "postgresql":
            conn.execute(_LOCK_PROJECT, {"project": project})

    @staticmethod
    def _check_active_cap(conn: Connection, project: str, cap: int) -> None:
        """Refuse the create whose own (uncommitted) export makes the project's active
        exports more than ``cap``."""
        active = conn.execute(_COUNT_ACTIVE_UP_TO, {"project": project, "cap": cap + 1})
        if active.scalar_one() > cap:
            raise ActiveLimitError(
                f"project {project!r} has {cap} exports queued or running, the most "
                "allowed; wait for one to finish or cancel one"
            )

    @staticmethod
    def _replay(found: sa.Row[Any], export: ExportRecord) -> ExportRecord:
        if found.request_hash != export.request_hash:
            raise IdempotencyConflictError(
                f"idempotency key {export.idempotency_key!r} was already used in project "
                f"{export.project!r} for export {found.id} with a different request; "
                "repeat a key only with the same request, or use a new key"
            )
        return records.export_record(found)

    def _read_exports(self, query: sa.Select[Any]) -> list[ExportRecord]:
        rows = self._tx(lambda c: c.execute(query).all(), read_only=True)
        return [records.export_record(r) for r in rows]

    def _in_project(self, conn: Connection, project: str, export_id: str) -> ExportRecord | None:
        found = conn.execute(sa.select(exports).where(
            exports.c.id == export_id, exports.c.project == project)).first()
        return records.export_record(found) if found is not None else None

    def export_get(self, project: str | None, export_id: str) -> ExportRecord | None:
        if project is None:
            query, params = _EXPORT_BY_ID, {"export_id": export_id}
        else:
            query, params = _EXPORT_IN_PROJECT, {"export_id": export_id, "project": project}
        row = self._tx(lambda c: c.execute(query, params).first(), read_only=True)
        return records.export_record(row) if row is not None else None

    def export_list(
        self,
        project: str,
        *,
        states: Sequence[ExportState] | None = None,
        limit: int = 50,
        before_id: str | None = None,
    ) -> list[ExportRecord]:
        query = sa.select(exports).where(exports.c.project == project)
        if states is not None:
            query = query.where(exports.c.state.in_([ExportState(s).value for s in states]))
        if before_id is not None:
            query = query.where(exports.c.id < before_id)
        return self._read_exports(query.order_by(exports.c.id.desc()).limit(limit))

    @functools.cached_property
    def _export_complete(self) -> sa.Update:
        export_id: sa.BindParameter[str] = sa.bindparam("p_export")
        return (
            sa.update(exports)
            .where(exports.c.id == export_id, exports.c.state == "running",
                   ~_not_done(export_id))
            .values(state="completed",
                    manifest=sa.bindparam("p_manifest", type_=exports.c.manifest.type),
                    finished_at=self._now, updated_at=self._now)
            .returning(*exports.c)
        )

    def export_complete(self, export_id: str, manifest: dict[str, Any]) -> bool:
        stmt, params = self._export_complete, {"p_export": export_id, "p_manifest": manifest}

        def run(conn: Connection) -> bool:
            row = conn.execute(stmt, params).first()
            if row is not None:
                self._outbox(conn, row, "export.completed")
            return row is not None

        return self._tx(run)

    def export_fail(self, export_id: str, error: str) -> bool:
        return self._tx(lambda c: self._fail_export(c, export_id, *public_and_detail(error)))

    def export_cancel(self, project: str, export_id: str) -> ExportRecord | None:
        stmt = (
            sa.update(exports)
            .where(exports.c.id == export_id, exports.c.project == project,
                   exports.c.state.in_(ACTIVE))
            .values(state="cancelled", finished_at=self._now, updated_at=self._now,
                    cancel_requested=running_tasks(export_id))
            .returning(*exports.c)
        )

        def run(conn: Connection) -> ExportRecord | None:
            row = conn.execute(stmt).first()
            if row is None:  # terminal already, or not in this project
                return self._in_project(conn, project, export_id)
            self._cancel_queued(conn, export_id)
            self._outbox(conn, row, "export.cancelled")
            return records.export_record(row)

        return self._tx(run)

    def export_retry(self, project: str, export_id: str) -> ExportRecord | None:
        restart = exports.c.cleaned_at.is_not(None)
        stmt = (
            sa.update(exports)
            .where(exports.c.id == export_id, exports.c.project == project,
                   exports.c.state == "failed", ~running_tasks(export_id))
            # Every task done already (it failed while finalizing): finalizable at once.
            .values(state=sa.case((sa.or_(restart, _not_done(export_id)), "queued"),
                                  else_="running"),
                    error=None, error_detail=None, finished_at=None, cancel_requested=False,
                    # a snapshot dies with its coordinator's session: a retry takes a new one
                    snapshot_id=None, snapshot_owner=None, snapshot_at=None,
                    updated_at=self._now, deadline_at=self._now + exports.c.max_duration)
            .returning(*exports.c)
        )

        def run(conn: Connection) -> ExportRecord | None:
            row = conn.execute(stmt).first()
            if row is None:  # not failed, still stopping, or not in this project
                return self._in_project(conn, project, export_id)
            requeue = sa.update(task_table).where(task_table.c.export_id == export_id)
            values: dict[str, Any] = {"state": "queued", "attempts": 0, "error": None,
                                      "run_after": self._now, "updated_at": self._now,
                                      # a remote engine's query of the failed run is over
                                      "query_id": None, "next_uri": None, "poll_count": 0,
                                      "next_poll_at": None, "submitted_at": None}
            if row.cleaned_at is None:
                # Outputs are still there: continue from the checkpoints.
                requeue = requeue.where(task_table.c.state.in_(("failed", "cancelled")))
            else:
                # Its outputs were removed: every task starts over (keeping its plan).
                values.update(checkpoint=None, rows=0, bytes=0)
                conn.execute(sa.update(exports).where(exports.c.id == export_id)
                             .values(cleaned_at=None))
            requeued = conn.execute(
                requeue.values(**values).returning(task_table.c.id, task_table.c.updated_at)
            ).all()
            self._events(conn, [
                {"task_id": r.id, "export_id": export_id, "kind": "requeue",
                 "lease_token": None, "worker": None, "at": r.updated_at}
                for r in requeued
            ])
            return records.export_record(row)

        return self._tx(run)

    def export_snapshot_set(self, export_id: str, snapshot_id: str, owner: str) -> bool:
        stmt = (
            sa.update(exports)
            .where(exports.c.id == export_id, exports.c.state.in_(ACTIVE),
                   exports.c.snapshot_id.is_(None))
            .values(snapshot_id=snapshot_id, snapshot_owner=owner, snapshot_at=self._now,
                    updated_at=self._now)
            .returning(exports.c.id)
        )
        return self._tx(lambda c: c.execute(stmt).first() is not None)

    def export_delete(self, project: str, export_id: str) -> bool:
        stmt = (
            sa.delete(exports)
            .where(exports.c.id == export_id, exports.c.project == project,
                   exports.c.state.in_(TERMINAL), ~running_tasks(export_id))
            .returning(exports.c.id)
        )
        # Its tasks, lease log and deliveries go with it (ON DELETE CASCADE).
        return self._tx(lambda c: c.execute(stmt).first() is not None)

    def export_list_finalizable(self) -> list[ExportRecord]:
        return self._read_exports(
            sa.select(exports)
            .where(exports.c.state == "running", ~_not_done(exports.c.id))
            .order_by(exports.c.id)
        )

    def export_list_overdue(self) -> list[ExportRecord]:
        return self._read_exports(
            sa.select(exports)
            .where(exports.c.state.in_(ACTIVE), exports.c.deadline_at <= self._now)
            .order_by(exports.c.id)
        )

    def export_count_active(self, project: str | None = None, *, limit: int | None = None
                            ) -> int:
        if project is not None and limit is not None:
            query, params = _COUNT_ACTIVE_UP_TO, {"project": project, "cap": limit}
        else:
            query, params = _count_active(project, limit), {}
        return int(self._tx(lambda c: c.execute(query, params).scalar_one(), read_only=True))

    def export_list_cancelled_with_outputs(self) -> list[ExportRecord]:
        # Not while a task still runs: it could write after the outputs were removed.
        return self._read_exports(
            sa.select(exports)
            .where(exports.c.state.in_(DEAD), exports.c.cleaned_at.is_(None),
                   ~running_tasks(exports.c.id))
            .order_by(exports.c.id)
        )

    def export_list_expirable(self, retention_seconds: float) -> list[ExportRecord]:
        return self._read_exports(
            sa.select(exports)
            .where(exports.c.state == "completed", exports.c.expired_at.is_(None),
                   exports.c.finished_at <= self._now - sa.literal(float(retention_seconds),
                                                                   sa.Double))
            .order_by(exports.c.id)
        )

    def export_expire(self, export_id: str) -> bool:
        stmt = (
            sa.update(exports)
            .where(exports.c.id == export_id, exports.c.state == "completed",
                   exports.c.expired_at.is_(None))
            .values(expired_at=self._now, updated_at=self._now)
            .returning(exports.c.id)
        )
        return self._tx(lambda c: c.execute(stmt).first() is not None)

    def export_mark_cleaned(self, export_id: str) -> bool:
        stmt = (
            sa.update(exports)
            .where(exports.c.id == export_id, exports.c.state.in_(DEAD),
                   exports.c.cleaned_at.is_(None), ~running_tasks(export_id))
            .values(cleaned_at=self._now, updated_at=self._now)
            .returning(exports.c.id)
        )
        return self._tx(lambda c: c.execute(stmt).first() is not None)
