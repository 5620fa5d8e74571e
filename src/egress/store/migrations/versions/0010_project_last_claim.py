"""The claim serves projects in turn: the newest claim of each project is read through
an index (project, claimed_at), so that between projects with as few running tasks the
one served longest ago comes first.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_tasks_project_claimed", "tasks", ["project", "claimed_at"])


def downgrade() -> None:
    op.drop_index("ix_tasks_project_claimed", "tasks")
