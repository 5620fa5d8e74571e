"""Claim index: a project's oldest ready tasks in claim order.

The claim reads, per project, only the oldest few ready tasks
(``ix_tasks_ready``: state, project, run_after, created_at, seq, id) instead of ranking
every ready task. The index starts with (state, project), so it replaces
``ix_tasks_state_project``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_tasks_ready", "tasks",
                    ["state", "project", "run_after", "created_at", "seq", "id"])
    op.drop_index("ix_tasks_state_project", table_name="tasks")


def downgrade() -> None:
    op.create_index("ix_tasks_state_project", "tasks", ["state", "project"])
    op.drop_index("ix_tasks_ready", table_name="tasks")
