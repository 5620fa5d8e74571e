"""The claim: one statement that leases the next ready tasks, fairly across projects.

Order: every ready task gets the score ``running tasks of its project + its rank among
the project's ready tasks`` (rank by ``run_after``, i.e. the task that has been ready
longest first, then creation). Lowest score first: the project with the fewest running
tasks gets its oldest ready task, and a claim of several tasks interleaves projects.
A task whose score is above ``project_cap`` would exceed the project's cap: skipped.

PostgreSQL locks the chosen rows with ``FOR UPDATE SKIP LOCKED``: concurrent claimers
skip each other's candidates instead of waiting, and a row claimed and committed by
another worker since this statement's snapshot fails the re-checked ``state = 'queued'``,
so no task is ever claimed twice. Under such a race the cap can be exceeded by the
tasks the racing claimers took (each counted running tasks in its own snapshot).

SQLite has a single writer: the claim runs inside ``BEGIN IMMEDIATE``, so no other
transaction can change the tasks between the SELECT and the UPDATE and no SKIP LOCKED
is needed (SQLAlchemy renders nothing for FOR UPDATE there). The cap is exact.
"""

from __future__ import annotations

import sqlalchemy as sa

from egress.store.schema import exports, tasks

_CLAIMABLE_EXPORT_STATES = ("queued", "running")


def claim_statement(
    now: sa.ColumnElement[float],
    new_token: sa.ColumnElement[str],
    *,
    worker: str,
    lease_seconds: float,
    project_cap: int,
    limit: int,
) -> sa.Update:
    t, e = tasks, exports
    running = (
        sa.select(t.c.project, sa.func.count().label("n"))
        .where(t.c.state == "running")
        .group_by(t.c.project)
        .cte("running")
    )
    rank = sa.func.row_number().over(
        partition_by=t.c.project, order_by=(t.c.run_after, t.c.created_at, t.c.seq, t.c.id)
    )
    ready = (
        sa.select(
            t.c.id,
            t.c.run_after,
            t.c.created_at,
            t.c.seq,
            (sa.func.coalesce(running.c.n, 0) + rank).label("score"),
        )
        .select_from(
            t.join(e, e.c.id == t.c.export_id).outerjoin(
                running, running.c.project == t.c.project
            )
        )
        .where(
            t.c.state == "queued",
            t.c.run_after <= now,
            # Cancelled and failed exports are terminal: their tasks are never claimed.
            e.c.state.in_(_CLAIMABLE_EXPORT_STATES),
        )
        .cte("ready")
    )
    candidate = (
        sa.select(t.c.id)
        .join(ready, ready.c.id == t.c.id)
        .where(t.c.state == "queued", ready.c.score <= project_cap)
        .order_by(ready.c.score, ready.c.run_after, ready.c.created_at, ready.c.seq, t.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=t)
        .cte("candidate")
    )
    return (
        sa.update(t)
        .where(t.c.id.in_(sa.select(candidate.c.id)), t.c.state == "queued")
        .values(
            state="running",
            lease_owner=worker,
            lease_token=new_token,
            lease_expires_at=now + sa.literal(float(lease_seconds), sa.Double),
            updated_at=now,
        )
        .returning(*t.c)
    )
