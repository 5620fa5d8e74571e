"""The claim: one statement that leases the next ready tasks, fairly across projects.

Order: every ready task gets the score ``running tasks of its project + its rank among
the project's ready tasks`` (rank by ``run_after``, i.e. the task that has been ready
longest first, then creation). Lowest score first: the project with the fewest running
tasks gets its oldest ready task, and a claim of several tasks interleaves projects.
Between equal scores the project whose newest claim is oldest goes first (projects
served in turn): ordered by task age alone, the projects whose backlog came first kept
every slot whenever they had as few running tasks as the others, and projects queued
after them waited for those whole backlogs (the fleet test caught it: with 12 projects
on 8 slots, the last four got their first claim after 160 others). A task whose score
is above ``project_cap`` would exceed the project's cap: skipped.

PostgreSQL locks the chosen rows with ``FOR UPDATE SKIP LOCKED``: concurrent claimers
skip each other's candidates instead of waiting, and a row claimed and committed by
another worker since this statement's snapshot fails the re-checked ``state = 'queued'``,
so no task is ever claimed twice. Under such a race the cap can be exceeded by the
tasks the racing claimers took (each counted running tasks in its own snapshot).

SQLite has a single writer: the claim runs inside ``BEGIN IMMEDIATE``, so no other
transaction can change the tasks between the SELECT and the UPDATE and no SKIP LOCKED
is needed (SQLAlchemy renders nothing for FOR UPDATE there). The cap is exact.

Cost: only a project's oldest ``min(project_cap, limit + LOCKED_MARGIN)`` ready tasks
can be chosen (a task ranked beyond ``project_cap`` has a score above the cap, and no
claim takes more than ``limit``), so each project contributes just those, read in
claim order from ``ix_tasks_ready`` (state, project, run_after, created_at, seq, id):
O(projects × limit) rows ranked per claim instead of every ready task of the backlog.
PostgreSQL reads them with a LATERAL subquery per project; SQLite, which has no
LATERAL, with a correlated ``IN (… LIMIT k)`` per project, the same rows. Before this,
the whole backlog was ranked on every claim, and on PostgreSQL, with statistics of
tables that had just grown from empty, the planner ran that ranking once per queued
task: 0.8–3 s per claim with 1,000 tasks queued.

Source limits (``[sources.NAME] max_tasks``): a source may have at most that many tasks
running (or submitted to a remote engine) across the fleet. Tasks of a source at its
limit are not candidates (so they hold no project's turn), and among the candidates a
task's rank within its source, added to the source's running tasks, must stay within
the limit (a claim of several tasks takes no more than the free slots). With limits the
claim must see every claim committed before it, or two racing claimers would each take
the last slot: on PostgreSQL the claimers then queue on one transaction-level advisory
lock (``CLAIM_LOCK``, taken by the store before the statement); SQLite's single writer
already serialises them.
"""

from __future__ import annotations

import sqlalchemy as sa

from egress.store.schema import exports, tasks

_CLAIMABLE_EXPORT_STATES = ("queued", "running")
#: Task states that occupy a source's slot: read by a worker, or a query submitted to it.
_BUSY_TASK_STATES = ("running", "submitted")
#: The PostgreSQL advisory lock claims with source limits queue on (any fixed number).
CLAIM_LOCK = 0x6567_7265_7373
#: Ready tasks per project beyond ``limit`` that a claim looks at: the ones other
#: claimers hold locked (SKIP LOCKED) do not leave it empty-handed.
LOCKED_MARGIN = 4


def claim_statement(
    now: sa.ColumnElement[float],
    new_token: sa.ColumnElement[str],
    *,
    worker: str,
    lease_seconds: float,
    project_cap: int,
    limit: int,
    dialect: str,
    source_limits: tuple[tuple[str, int], ...] = (),
) -> sa.Update:
    """The claim; ``source_limits``: (source name, most running tasks) pairs."""
    t, e = tasks, exports
    limited = dict(source_limits)
    if any(n < 1 for n in limited.values()):
        raise ValueError(f"a source limit must be >= 1: {limited}")
    busy_t, busy_e = t.alias("busy_t"), e.alias("busy_e")
    # running tasks of each limited source (few rows: at most the fleet's slots)
    source_busy = (
        sa.select(busy_e.c.source, sa.func.count().label("n"))
        .select_from(busy_t.join(busy_e, busy_e.c.id == busy_t.c.export_id))
        .where(busy_t.c.state.in_(_BUSY_TASK_STATES), busy_e.c.source.in_(list(limited)))
        .group_by(busy_e.c.source)
    )

    def limit_of(source: sa.ColumnElement[str]) -> sa.ColumnElement[int]:
        return sa.case(*((source == name, sa.literal(n)) for name, n in limited.items()),
                       else_=sa.null())

    running = (
        sa.select(t.c.project, sa.func.count().label("n"))
        .where(t.c.state == "running")
        .group_by(t.c.project)
        .cte("running")
    )
    # aliases: each subquery reads tasks on its own, none correlates with the outer one
    pt, q = t.alias("pt"), t.alias("q")
    per_project = min(project_cap, limit + LOCKED_MARGIN)
    projects = (
        sa.select(pt.c.project)
        .where(pt.c.state == "queued", pt.c.run_after <= now)
        .distinct()
        .subquery("projects")
    )
    # a project's oldest ready tasks of live exports (cancelled and failed exports are
    # terminal: their tasks are never claimed), in claim order, at most per_project
    oldest = (
        sa.select(q.c.id)
        .join(e, e.c.id == q.c.export_id)
        .where(q.c.project == projects.c.project, q.c.state == "queued",
               q.c.run_after <= now, e.c.state.in_(_CLAIMABLE_EXPORT_STATES))
        .order_by(q.c.run_after, q.c.created_at, q.c.seq, q.c.id)
        .limit(per_project)
    )
    if limited:
        # a source at its limit holds no project's turn: its tasks are not candidates
        full = (source_busy.having(sa.func.count() >= limit_of(busy_e.c.source))
                .with_only_columns(busy_e.c.source))
        oldest = oldest.where(e.c.source.not_in(full.scalar_subquery()))
    if dialect == "postgresql":
        first = oldest.lateral("first")
        chosen = sa.select(first.c.id).select_from(projects.join(first, sa.true()))
    else:
        top = t.alias("top")
        chosen = sa.select(top.c.id).select_from(projects).join(
            top, top.c.id.in_(oldest.correlate(projects).scalar_subquery()))
    order = (t.c.run_after, t.c.created_at, t.c.seq, t.c.id)
    rank = sa.func.row_number().over(partition_by=t.c.project, order_by=order)
    # the project's newest claim (index ix_tasks_project_claimed): between projects of
    # the same score, the one served longest ago goes first; never served, first of all
    served = t.alias("served")
    last_claim = sa.func.coalesce(
        sa.select(sa.func.max(served.c.claimed_at))
        .where(served.c.project == t.c.project)
        .scalar_subquery(),
        sa.literal(0.0, sa.Double),
    )
    columns = [
        t.c.id,
        t.c.run_after,
        t.c.created_at,
        t.c.seq,
        (sa.func.coalesce(running.c.n, 0) + rank).label("score"),
        last_claim.label("last_claim"),
    ]
    joined = t.outerjoin(running, running.c.project == t.c.project)
    if limited:
        busy = source_busy.cte("source_busy")
        own = e.alias("own")
        joined = joined.join(own, own.c.id == t.c.export_id).outerjoin(
            busy, busy.c.source == own.c.source)
        columns += [own.c.source.label("source"),
                    sa.func.coalesce(busy.c.n, 0).label("source_busy")]
    ready = (
        sa.select(*columns)
        .select_from(joined)
        .where(t.c.id.in_(chosen))
        .cte("ready")
        # computed once, whatever the statistics say (of tables that just grew from
        # empty, they said one row, and the planner re-ran it per queued task)
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )
    # the best few by score, then their rows in tasks: from this small side, so no
    # planner can choose to scan every queued task once per ready one
    within: sa.ColumnElement[bool] = ready.c.score <= project_cap
    if limited:
        # the free slots of a source go to its best candidates, one each
        source_rank = sa.func.row_number().over(
            partition_by=ready.c.source,
            order_by=(ready.c.score, ready.c.last_claim, ready.c.run_after,
                      ready.c.created_at, ready.c.seq, ready.c.id))
        ranked = sa.select(ready, source_rank.label("source_rank")).subquery("ranked")
        ready = ranked  # type: ignore[assignment]  # the same columns, and the rank
        slots = limit_of(ranked.c.source)
        within = sa.and_(ranked.c.score <= project_cap, sa.or_(
            slots.is_(None), ranked.c.source_busy + ranked.c.source_rank <= slots))
    best = (
        sa.select(ready)
        .where(within)
        .order_by(ready.c.score, ready.c.last_claim, ready.c.run_after, ready.c.created_at,
                  ready.c.seq, ready.c.id)
        .limit(limit + LOCKED_MARGIN)
        .subquery("best")
    )
    if dialect == "postgresql":
        # each row locked by primary key; a locked row comes back in its newest
        # version, so a task another claimer took since this statement's snapshot
        # shows as no longer queued
        locked = (
            sa.select(t.c.state)
            .where(t.c.id == best.c.id)
            .with_for_update(skip_locked=True)
            .lateral("locked")
        )
        picked = (sa.select(best.c.id).select_from(best.join(locked, sa.true()))
                  .where(locked.c.state == "queued"))
    else:
        picked = (sa.select(best.c.id).join(t, t.c.id == best.c.id)
                  .where(t.c.state == "queued"))
    candidate = (
        picked
        .order_by(best.c.score, best.c.last_claim, best.c.run_after, best.c.created_at,
                  best.c.seq, best.c.id)
        .limit(limit)
        .cte("candidate")
    )
    # No state test here: the candidates are locked (PostgreSQL, after re-checking that
    # they are still queued) or no other writer runs (SQLite); with one, the planner
    # (statistics of tables that grew from empty: "1 row queued") scanned every queued
    # task once per candidate.
    return (
        sa.update(t)
        .where(t.c.id.in_(sa.select(candidate.c.id)))
        .values(
            state="running",
            lease_owner=worker,
            lease_token=new_token,
            lease_expires_at=now + sa.literal(float(lease_seconds), sa.Double),
            claimed_at=now,
            updated_at=now,
        )
        .returning(*t.c)
    )
