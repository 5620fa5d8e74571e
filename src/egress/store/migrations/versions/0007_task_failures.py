"""Tasks count all their failures beside the failures since their last progress.

``attempts`` becomes the count of failures without progress (a committed part resets it:
max_attempts is for a task that is stuck); ``failures`` keeps the total, shown to users.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("failures", sa.Integer(), nullable=False,
                                     server_default=sa.text("0")))
    op.execute("UPDATE tasks SET failures = attempts")


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("failures")
