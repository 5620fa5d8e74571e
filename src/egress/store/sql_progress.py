"""Progress reads of SqlJobStore: the state and counters of many exports in one query,
and the queue's gauges for the metrics (``queue_stats``).

The event hub of the API asks this once per interval for every export that somebody
watches, instead of each client polling the database on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from egress.domain.jobs import ExportState, TaskState
from egress.domain.progress import ExportProgress, TaskProgress
from egress.store.base import QueueStats
from egress.store.core import SqlCore
from egress.store.schema import exports, tasks

#: Ids per statement: far below SQLite's bound-parameter limit (32766), and one
#: statement for any realistic number of watched exports.
IDS_PER_QUERY = 2000

_COLUMNS = (
    exports.c.id, exports.c.project, exports.c.state, exports.c.error, exports.c.created_at,
    exports.c.started_at, exports.c.finished_at, exports.c.updated_at,
    tasks.c.table_name, tasks.c.seq, tasks.c.state.label("task_state"), tasks.c.rows,
    tasks.c.bytes, tasks.c.rows_estimate, tasks.c.attempts, tasks.c.error.label("task_error"),
    tasks.c.failures,
    tasks.c.updated_at.label("task_updated_at"),
)


class ProgressOps(SqlCore):
    def export_progress_many(self, export_ids: Sequence[str]) -> dict[str, ExportProgress]:
        ids = sorted(set(export_ids))
        if not ids:
            return {}

        def run(conn: Connection) -> list[sa.Row[Any]]:
            rows: list[sa.Row[Any]] = []
            for i in range(0, len(ids), IDS_PER_QUERY):
                # One statement per chunk: an export and its tasks come from one snapshot.
                rows += conn.execute(  # type: ignore[arg-type]  # Row's generic arity
                    sa.select(*_COLUMNS)
                    .select_from(exports.outerjoin(tasks, tasks.c.export_id == exports.c.id))
                    .where(exports.c.id.in_(ids[i : i + IDS_PER_QUERY]))
                    .order_by(exports.c.id, tasks.c.seq)
                ).all()
            return rows

        return _group(self._tx(run, read_only=True))


    def export_throughput(self, format: str, limit: int = 50) -> list[tuple[str, int, float]]:
        rows = sa.select(sa.func.coalesce(sa.func.sum(tasks.c.rows), 0)).where(
            tasks.c.export_id == exports.c.id).scalar_subquery()
        query = (
            sa.select(exports.c.source, rows.label("rows"),
                      (exports.c.finished_at - exports.c.started_at).label("seconds"))
            .where(exports.c.state == ExportState.COMPLETED.value,
                   exports.c.format == format, exports.c.started_at.is_not(None),
                   exports.c.finished_at.is_not(None))
            .order_by(exports.c.finished_at.desc())
            .limit(limit)
        )
        found = self._tx(lambda c: c.execute(query).all(), read_only=True)
        return [(r.source, int(r.rows), float(r.seconds)) for r in found]


    def queue_stats(self) -> QueueStats:
        # three index scans: exports (state, deadline_at), tasks ix_tasks_claim
        by_export_state = sa.select(exports.c.state, sa.func.count()).group_by(exports.c.state)
        by_task_state = sa.select(tasks.c.state, sa.func.count()).group_by(tasks.c.state)
        ready = sa.select(sa.func.count(), sa.func.min(tasks.c.run_after), self._now).where(
            tasks.c.state == TaskState.QUEUED.value, tasks.c.run_after <= self._now)

        def run(conn: Connection) -> QueueStats:
            export_counts = {str(s): int(n) for s, n in conn.execute(by_export_state).all()}
            task_counts = {str(s): int(n) for s, n in conn.execute(by_task_state).all()}
            count, oldest, now = conn.execute(ready).one()
            age = max(0.0, float(now) - float(oldest)) if oldest is not None else 0.0
            return QueueStats(exports=export_counts, tasks=task_counts, ready=int(count),
                              oldest_ready_seconds=age)

        return self._tx(run, read_only=True)


def _group(rows: Sequence[sa.Row[Any]]) -> dict[str, ExportProgress]:
    heads: dict[str, sa.Row[Any]] = {}
    task_lists: dict[str, list[TaskProgress]] = {}
    versions: dict[str, float] = {}
    for r in rows:
        heads.setdefault(r.id, r)
        found = task_lists.setdefault(r.id, [])
        versions[r.id] = max(versions.get(r.id, r.updated_at), r.task_updated_at or 0.0)
        if r.seq is not None:  # an export without tasks has one row of NULLs
            found.append(TaskProgress(
                table=r.table_name, seq=r.seq, state=TaskState(r.task_state), rows=r.rows,
                bytes=r.bytes, rows_estimate=r.rows_estimate, attempts=r.attempts,
                error=r.task_error, failures=r.failures,
            ))
    return {
        export_id: ExportProgress(
            id=export_id, project=h.project, state=ExportState(h.state), error=h.error,
            created_at=h.created_at, started_at=h.started_at, finished_at=h.finished_at,
            version=versions[export_id], tasks=tuple(task_lists[export_id]),
        )
        for export_id, h in heads.items()
    }
