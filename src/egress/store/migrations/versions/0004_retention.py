"""Retention: completed exports whose files were removed after the retention period.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN: SQLite and PostgreSQL both do it in place
    op.add_column("exports", sa.Column("expired_at", sa.Double()))


def downgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("expired_at")
