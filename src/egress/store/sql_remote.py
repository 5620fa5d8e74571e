"""Remote-engine task operations of SqlJobStore: submit, take due polls, record a poll.

A remote task moves ``queued → running (claimed) → submitted → queued (streaming) →
running → done``, or ends ``failed`` / ``cancelled``. While ``submitted`` it holds no
lease: its polling state (query id, next URI, poll count, next poll time) is in the row,
and any worker's poll pass takes it when it is due. Taking it pushes ``next_poll_at``
out by a hold time, so two workers do not poll one query at once; every write after a
poll is fenced on the ``poll_count`` the pass read (a pass that lost the race to another
writes nothing).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from egress.domain.jobs import TaskRecord
from egress.failures import public_and_detail
from egress.store import records
from egress.store.core import DEAD, SqlCore
from egress.store.schema import exports, tasks


class RemoteOps(SqlCore):

    def remote_submitted(
        self, task_id: str, token: str, *, query_id: str, next_uri: str | None,
        delay: float, note: str | None = None,
    ) -> bool:
        """The claimed task's query is on the engine: keep its state, end the lease."""
        return self._end_lease(
            task_id, token, "release", state="submitted", query_id=query_id,
            next_uri=next_uri, poll_count=0, submitted_at=self._now, polled_at=self._now,
            next_poll_at=self._seconds(delay),
            remote_note=sa.func.coalesce(note, tasks.c.remote_note))

    def remote_take_due(self, *, hold_seconds: float, limit: int) -> list[TaskRecord]:
        """Up to ``limit`` submitted tasks due for a poll, oldest due first; each is held
        for ``hold_seconds`` (not due for anyone else) while this pass polls it."""
        # a task whose export ended is due at once: its query must stop on the engine
        ended = sa.exists().where(exports.c.id == tasks.c.export_id,
                                  exports.c.state.in_(DEAD)).correlate(tasks)
        due = (
            sa.select(tasks.c.id)
            .where(tasks.c.state == "submitted",
                   sa.or_(tasks.c.next_poll_at <= self._now, ended))
            .order_by(tasks.c.next_poll_at, tasks.c.id)
            .limit(limit)
        )
        if self.dialect == "postgresql":
            due = due.with_for_update(skip_locked=True)
        stmt = (
            sa.update(tasks)
            .where(tasks.c.id.in_(due.scalar_subquery()), tasks.c.state == "submitted")
            .values(next_poll_at=self._seconds(hold_seconds))
            .returning(*tasks.c)
        )
        return sorted((records.task_record(r) for r in
                       self._tx(lambda c: c.execute(stmt).all())),
                      key=lambda t: (t.polled_at or 0.0, t.id))

    def _polled(self, task: TaskRecord) -> sa.Update:
        """An UPDATE of a submitted task that nobody polled since ``task`` was read."""
        return sa.update(tasks).where(
            tasks.c.id == task.id, tasks.c.state == "submitted",
            tasks.c.poll_count == task.poll_count)

    def remote_polled(self, task: TaskRecord, *, next_uri: str | None, delay: float) -> bool:
        """Still waiting on the engine: one more poll, the next one ``delay`` s from now."""
        stmt = self._polled(task).values(
            next_uri=next_uri if next_uri is not None else tasks.c.next_uri,
            poll_count=tasks.c.poll_count + 1, polled_at=self._now,
            next_poll_at=self._seconds(delay), updated_at=self._now)
        return self._tx(lambda c: c.execute(stmt).rowcount == 1)

    def remote_stream(
        self, task: TaskRecord, *, next_uri: str, columns: list[list[str]]
    ) -> bool:
        """The result is ready: queue the task for a slot to stream it from ``next_uri``."""
        stmt = self._polled(task).values(
            state="queued", next_uri=next_uri, result_columns=columns,
            poll_count=tasks.c.poll_count + 1, polled_at=self._now, next_poll_at=None,
            run_after=self._now, updated_at=self._now)
        return self._tx(lambda c: c.execute(stmt).rowcount == 1)

    def remote_done(self, task: TaskRecord, *, checkpoint: dict[str, Any], rows: int,
                    bytes: int, spec: dict[str, Any], columns: list[list[str]]) -> bool:
        """The engine wrote the output itself (unload): the task is done."""
        stmt = self._polled(task).values(
            state="done", checkpoint=checkpoint, spec=spec, rows=rows, bytes=bytes, error=None,
            result_columns=columns,
            poll_count=tasks.c.poll_count + 1, polled_at=self._now, next_poll_at=None,
            updated_at=self._now)
        return self._tx(lambda c: c.execute(stmt).rowcount == 1)

    def remote_resubmit(self, task: TaskRecord, *, note: str,
                        mode: str | None = None) -> bool:
        """The engine lost the query (or it must run another way): submit it again."""
        values: dict[str, Any] = {
            "state": "queued", "query_id": None, "next_uri": None, "poll_count": 0,
            "next_poll_at": None, "submitted_at": None, "result_columns": None,
            "remote_note": note, "run_after": self._now, "updated_at": self._now}
        if mode is not None:
            values["remote_mode"] = mode
        stmt = self._polled(task).values(**values)
        return self._tx(lambda c: c.execute(stmt).rowcount == 1)

    def remote_fail(self, task: TaskRecord, error: str) -> bool:
        """The engine failed the query: the task fails, and its export with it."""
        public, detail = public_and_detail(error)
        stmt = self._polled(task).values(
            state="failed", error=public, next_poll_at=None, attempts=tasks.c.attempts + 1,
            failures=tasks.c.failures + 1, polled_at=self._now, updated_at=self._now
        ).returning(tasks.c.export_id, tasks.c.table_name)

        def run(conn: Connection) -> bool:
            row = conn.execute(stmt).first()
            if row is None:
                return False
            self._fail_for_table(conn, row.export_id, row.table_name, public, detail)
            return True

        return self._tx(run)

    def remote_cancelled(self, task: TaskRecord) -> bool:
        """The query was stopped on the engine because its export ended."""
        stmt = self._polled(task).values(
            state="cancelled", next_poll_at=None, updated_at=self._now
        ).returning(tasks.c.export_id)

        def run(conn: Connection) -> bool:
            row = conn.execute(stmt).first()
            if row is None:
                return False
            self._settle(conn, row.export_id)
            return True

        return self._tx(run)

    def remote_restart(self, task_id: str, token: str, *, note: str) -> bool:
        """A claimed task whose result the engine no longer holds starts over from
        nothing: no checkpoint, no query; queued at once (fenced by the lease)."""
        return self._end_lease(
            task_id, token, "requeue", state="queued", checkpoint=None, rows=0, bytes=0,
            query_id=None, next_uri=None, poll_count=0, next_poll_at=None, submitted_at=None,
            result_columns=None, remote_note=note, run_after=self._now)

    def remote_requeue_direct(self, task_id: str, token: str, *, note: str) -> bool:
        """An unload the engine cannot run: the claimed task is queued again, direct."""
        return self._end_lease(
            task_id, token, "requeue", state="queued", remote_mode="direct", query_id=None,
            next_uri=None, remote_note=note, run_after=self._now)

    def remote_list_stale(self, *, claimed_seconds: float, unpolled_seconds: float
                          ) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Remote tasks claimed ``claimed_seconds`` ago and never submitted, and
        submitted tasks not polled for ``unpolled_seconds``."""
        claimed = sa.select(tasks).where(
            tasks.c.state == "running", tasks.c.remote_mode.is_not(None),
            tasks.c.query_id.is_(None),
            tasks.c.claimed_at < self._now - sa.literal(float(claimed_seconds), sa.Double))
        unpolled = sa.select(tasks).where(
            tasks.c.state == "submitted",
            sa.func.coalesce(tasks.c.polled_at, tasks.c.submitted_at)
            < self._now - sa.literal(float(unpolled_seconds), sa.Double))

        def run(conn: Connection) -> tuple[list[TaskRecord], list[TaskRecord]]:
            return ([records.task_record(r) for r in conn.execute(claimed).all()],
                    [records.task_record(r) for r in conn.execute(unpolled).all()])

        return self._tx(run, read_only=True)

    def remote_reset_claim(self, task: TaskRecord) -> bool:
        """Put a claimed, never submitted remote task back in the queue (its worker is
        stuck before the engine took the query)."""
        assert task.lease_token is not None
        stmt = (
            sa.update(tasks)
            .where(tasks.c.id == task.id, tasks.c.lease_token == task.lease_token,
                   tasks.c.state == "running", tasks.c.query_id.is_(None))
            .values(state=self._back_to_queue(), lease_owner=None, lease_token=None,
                    lease_expires_at=None, run_after=self._now, updated_at=self._now)
            .returning(tasks.c.export_id, tasks.c.state, tasks.c.updated_at)
        )

        def run(conn: Connection) -> bool:
            row = conn.execute(stmt).first()
            if row is None:
                return False
            self._log_end(conn, task.id, task.lease_token or "", "rescue", row)
            self._settle(conn, row.export_id)
            return True

        return self._tx(run)

    def remote_export_dead(self, export_id: str) -> bool:
        """The export was cancelled or failed: its queries must stop on the engine."""
        query = sa.select(exports.c.state).where(exports.c.id == export_id)
        state = self._tx(lambda c: c.execute(query).scalar(), read_only=True)
        return state is None or state in ("cancelled", "failed")
