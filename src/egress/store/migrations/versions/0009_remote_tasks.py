"""Remote-engine tasks (Trino): submitted once, polled when due by any worker.

A task of a remote engine keeps its polling state here, never in a worker's memory:
the engine's query id and next URI, how often it was polled and when it is due again.
While ``submitted`` it holds no lease.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None

TIME: sa.Double[float] = sa.Double()

_OLD = "state IN ('queued', 'running', 'done', 'failed', 'cancelled')"
_NEW = "state IN ('queued', 'running', 'submitted', 'done', 'failed', 'cancelled')"


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("remote_mode", sa.String(16)))
        batch.add_column(sa.Column("query_id", sa.String(128)))
        batch.add_column(sa.Column("next_uri", sa.Text))
        batch.add_column(sa.Column("poll_count", sa.Integer, nullable=False,
                                   server_default=sa.text("0")))
        batch.add_column(sa.Column("next_poll_at", TIME))
        batch.add_column(sa.Column("submitted_at", TIME))
        batch.add_column(sa.Column("polled_at", TIME))
        batch.add_column(sa.Column("claimed_at", TIME))
        batch.add_column(sa.Column("result_columns", sa.Text))  # JSON text
        batch.add_column(sa.Column("remote_note", sa.Text))
        batch.drop_constraint(op.f("ck_tasks_state"), type_="check")
        batch.create_check_constraint(op.f("ck_tasks_state"), sa.text(_NEW))
    op.create_index("ix_tasks_due", "tasks", ["state", "next_poll_at"])


def downgrade() -> None:
    op.drop_index("ix_tasks_due", "tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint(op.f("ck_tasks_state"), type_="check")
        batch.create_check_constraint(op.f("ck_tasks_state"), sa.text(_OLD))
        for name in ("remote_note", "result_columns", "claimed_at", "polled_at",
                     "submitted_at", "next_poll_at", "poll_count", "next_uri", "query_id",
                     "remote_mode"):
            batch.drop_column(name)
