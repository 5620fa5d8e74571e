"""Task operations of SqlJobStore: claim, heartbeat, commit, requeue, finish, fail, rescue.

Everything fenced takes the lease token and changes the row only while that token
holds a running task (``_fenced``); zero rows means the lease is lost: False.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from egress.domain.ids import new_id
from egress.domain.jobs import Heartbeat, TaskRecord
from egress.failures import public_and_detail
from egress.store import records
from egress.store.base import LeaseEvent
from egress.store.claim import CLAIM_LOCK, claim_statement
from egress.store.core import DEAD, FENCE, SqlCore
from egress.store.schema import exports, task_events, tasks

_CLAIM_LOCK = sa.select(sa.func.pg_advisory_xact_lock(CLAIM_LOCK))
#: An export's tasks in order (the export id bound at execution).
_TASKS_OF_EXPORT = (sa.select(tasks).where(tasks.c.export_id == sa.bindparam("export_id"))
                    .order_by(tasks.c.seq))
_TASK_BY_ID = sa.select(tasks).where(tasks.c.id == sa.bindparam("p_task"))


@dataclass(frozen=True)
class _WorkerStatements:
    """The statements a worker runs for every part and every task, built once per store
    with their values bound at execution (the clock is the store's dialect's): building
    and compiling them on every call cost the workers more client CPU than the
    database spent running them (bench/worker_store_cpu.py)."""

    lease_held: sa.Select[Any]
    heartbeat: sa.Update
    commit: sa.Update
    commit_with_spec: sa.Update
    finish: sa.Update

    @classmethod
    def build(cls, now: sa.ColumnElement[float]) -> _WorkerStatements:
        stop = (
            sa.select(sa.or_(exports.c.cancel_requested.is_(True), exports.c.state.in_(DEAD)))
            .where(exports.c.id == tasks.c.export_id)
            .correlate(tasks)
            .scalar_subquery()
        )
        fenced = sa.update(tasks).where(*FENCE)
        commit_values: dict[str, Any] = {
            "checkpoint": sa.bindparam("p_checkpoint", type_=tasks.c.checkpoint.type),
            "rows": sa.bindparam("p_rows", type_=sa.BigInteger),
            "bytes": sa.bindparam("p_bytes", type_=sa.BigInteger),
            "updated_at": now,
            # progress (a part committed: more bytes) ends a streak of failures
            "attempts": sa.case((tasks.c.bytes != sa.bindparam("p_bytes"), 0),
                                else_=tasks.c.attempts),
        }
        commit_returning = (tasks.c.export_id, tasks.c.lease_owner, tasks.c.updated_at)
        return cls(
            lease_held=sa.select(tasks.c.id).where(*FENCE, tasks.c.lease_expires_at > now),
            heartbeat=fenced.values(
                lease_expires_at=now + sa.bindparam("p_lease", type_=sa.Double),
                updated_at=now,
            ).returning(tasks.c.lease_expires_at, stop.label("stop")),
            commit=fenced.values(**commit_values).returning(*commit_returning),
            commit_with_spec=fenced.values(
                **commit_values, spec=sa.bindparam("p_spec", type_=tasks.c.spec.type),
            ).returning(*commit_returning),
            finish=fenced.values(
                lease_owner=None, lease_token=None, lease_expires_at=None, updated_at=now,
                state="done", error=None,
            ).returning(tasks.c.export_id, tasks.c.state, tasks.c.updated_at),
        )


class TaskOps(SqlCore):

    def task_list(self, export_id: str) -> list[TaskRecord]:
        params = {"export_id": export_id}
        rows = self._tx(lambda c: c.execute(_TASKS_OF_EXPORT, params).all(), read_only=True)
        return [records.task_record(r) for r in rows]

    @cached_property
    def _worker_statements(self) -> _WorkerStatements:
        return _WorkerStatements.build(self._now)

    def task_get(self, task_id: str) -> TaskRecord | None:
        params = {"p_task": task_id}
        row = self._tx(lambda c: c.execute(_TASK_BY_ID, params).first(), read_only=True)
        return records.task_record(row) if row is not None else None

    def task_lease_held(self, task_id: str, token: str) -> bool:
        query, params = self._worker_statements.lease_held, {"p_task": task_id, "p_token": token}
        return self._tx(lambda c: c.execute(query, params).first(), read_only=True) is not None

    def task_claim(
        self, worker: str, *, lease_seconds: float, project_cap: int, limit: int = 1,
        source_limits: Mapping[str, int] | None = None,
    ) -> list[TaskRecord]:
        if limit < 1 or project_cap < 1:
            return []
        limits = tuple(sorted((source_limits or {}).items()))
        # built once per worker and settings: building and compiling it again on every
        # claim cost more client CPU than the server spends running it
        key = (worker, float(lease_seconds), project_cap, limit, limits)
        claims = self._claim_statements
        stmt = claims.get(key)
        if stmt is None:
            if len(claims) >= 64:  # a store shared by many short-lived worker names
                claims.clear()
            stmt = claims[key] = claim_statement(
                self._now, self._token, worker=worker, lease_seconds=lease_seconds,
                project_cap=project_cap, limit=limit, dialect=self.dialect,
                source_limits=limits)
        # with source limits the claim must see every claim committed before it (see
        # store/claim.py): PostgreSQL claimers queue on one advisory lock
        serialise = bool(limits) and self.dialect == "postgresql"

        def run(conn: Connection) -> list[TaskRecord]:
            if serialise:
                conn.execute(_CLAIM_LOCK)
            # RETURNING order is the plan's: put them in claim order (and the log too)
            claimed = sorted((records.task_record(r) for r in conn.execute(stmt).all()),
                             key=lambda t: (t.run_after, t.created_at, t.seq))
            if not claimed:
                return []
            # The export starts with its first claimed task; sorted ids keep the lock
            # order the same in every claimer.
            started = sorted({t.export_id for t in claimed})
            conn.execute(
                sa.update(exports)
                .where(exports.c.id == sa.bindparam("eid"), exports.c.state == "queued")
                .values(state="running", started_at=sa.func.coalesce(exports.c.started_at,
                                                                     self._now),
                        updated_at=self._now),
                [{"eid": e} for e in started],
            )
            self._events(conn, [
                {"task_id": t.id, "export_id": t.export_id, "kind": "claim",
                 "lease_token": t.lease_token, "worker": worker, "at": t.updated_at}
                for t in claimed
            ])
            return claimed

        return self._tx(run)

    def task_heartbeat(self, task_id: str, token: str, lease_seconds: float) -> Heartbeat:
        stmt = self._worker_statements.heartbeat
        params = {"p_task": task_id, "p_token": token, "p_lease": float(lease_seconds)}
        row = self._tx(lambda c: c.execute(stmt, params).first())
        if row is None:
            return Heartbeat(alive=False)
        return Heartbeat(alive=True, cancel_requested=bool(row.stop),
                         lease_expires_at=row.lease_expires_at)

    def task_commit(
        self,
        task_id: str,
        token: str,
        *,
        checkpoint: dict[str, Any],
        rows: int,
        bytes: int,
        spec: dict[str, Any] | None = None,
    ) -> bool:
        statements = self._worker_statements
        params: dict[str, Any] = {"p_task": task_id, "p_token": token,
                                  "p_checkpoint": checkpoint, "p_rows": rows, "p_bytes": bytes}
        stmt = statements.commit
        if spec is not None:
            stmt, params["p_spec"] = statements.commit_with_spec, spec

        def run(conn: Connection) -> bool:
            row = conn.execute(stmt, params).first()
            if row is None:
                return False
            self._events(conn, [{"task_id": task_id, "export_id": row.export_id,
                                 "kind": "commit", "lease_token": token,
                                 "worker": row.lease_owner, "at": row.updated_at}])
            return True

        return self._tx(run)

    def task_split(self, task_id: str, token: str, ranges: list[dict[str, Any]]) -> bool:
        if not ranges:
            raise ValueError("a split needs at least one range")
        first, rest = ranges[0], ranges[1:]
        becomes_first = (
            self._fenced(task_id, token)
            .values(key_range=first["key_range"], spec=first.get("spec"),
                    rows_estimate=first.get("rows_estimate"), updated_at=self._now)
            .returning(tasks.c.export_id, tasks.c.project, tasks.c.table_name, tasks.c.seq,
                       tasks.c.max_attempts, tasks.c.created_at,
                       # an export cancelled or failed meanwhile: its new ranges are not
                       # queued (a retry queues them with the other stopped tasks)
                       self._back_to_queue().label("state"))
        )

        def run(conn: Connection) -> bool:
            row = conn.execute(becomes_first).first()
            if row is None:
                return False
            if rest:
                # the task's created_at: the ranges queue where the table's task did
                conn.execute(tasks.insert().values(run_after=self._now, updated_at=self._now), [{
                    "id": new_id("tsk"), "export_id": row.export_id, "project": row.project,
                    "table_name": row.table_name, "seq": row.seq + k, "state": row.state,
                    "spec": r.get("spec"), "checkpoint": None, "rows": 0, "bytes": 0,
                    "rows_estimate": r.get("rows_estimate"), "attempts": 0, "failures": 0,
                    "max_attempts": row.max_attempts, "poll_count": 0,
                    "key_range": r["key_range"], "created_at": row.created_at,
                } for k, r in enumerate(rest, start=1)])
            return True

        return self._tx(run)

    def task_requeue(
        self,
        task_id: str,
        token: str,
        *,
        delay: float = 0.0,
        error: str | None = None,
        count_attempt: bool = False,
    ) -> bool:
        return self._end_lease(
            task_id, token, "requeue",
            state=self._back_to_queue(),
            error=None if error is None else public_and_detail(error)[0],
            run_after=self._seconds(max(0.0, delay)),
            attempts=tasks.c.attempts + (1 if count_attempt else 0),
            failures=tasks.c.failures + (1 if count_attempt else 0),
        )

    def task_finish(self, task_id: str, token: str) -> bool:
        return self._end_lease_with(self._worker_statements.finish, task_id, token, "finish")

    def task_fail(self, task_id: str, token: str, error: str) -> bool:
        public, detail = public_and_detail(error)
        stmt = (
            self._fenced(task_id, token)
            # the failing attempt counts: a task that failed at once shows 1 attempt
            .values(state="failed", error=public, lease_owner=None, lease_token=None,
                    lease_expires_at=None, attempts=tasks.c.attempts + 1,
                    failures=tasks.c.failures + 1, updated_at=self._now)
            .returning(tasks.c.export_id, tasks.c.table_name, tasks.c.state,
                       tasks.c.updated_at)
        )

        def run(conn: Connection) -> bool:
            row = conn.execute(stmt).first()
            if row is None:
                return False
            self._log_end(conn, task_id, token, "fail", row)
            self._fail_for_table(conn, row.export_id, row.table_name, public, detail)
            return True

        return self._tx(run)

    def task_rescue_expired(self) -> int:
        expired = (
            sa.select(tasks.c.id, tasks.c.lease_token)
            .where(tasks.c.state == "running", tasks.c.lease_expires_at < self._now)
        )
        found = self._tx(lambda c: c.execute(expired).all(), read_only=True)
        if not found:
            return 0  # the common case takes no write lock

        def run(conn: Connection) -> int:
            count = 0
            for task_id, token in found:
                # Still the same expired lease? (Its owner may have renewed or released it.)
                row = conn.execute(
                    self._fenced(task_id, token)
                    .where(tasks.c.lease_expires_at < self._now)
                    .values(state=self._back_to_queue(), lease_owner=None, lease_token=None,
                            lease_expires_at=None, run_after=self._now, updated_at=self._now)
                    .returning(tasks.c.export_id, tasks.c.state, tasks.c.updated_at)
                ).first()
                if row is not None:
                    count += 1
                    self._log_end(conn, task_id, token, "cancel" if row.state ==
                                  "cancelled" else "rescue", row)
                    self._settle(conn, row.export_id)
            return count

        return self._tx(run)

    def lease_events(self, task_id: str | None = None) -> list[LeaseEvent]:
        query = sa.select(task_events).order_by(task_events.c.id)
        if task_id is not None:
            query = query.where(task_events.c.task_id == task_id)
        rows = self._tx(lambda c: c.execute(query).all(), read_only=True)
        return [records.lease_event(r) for r in rows]
