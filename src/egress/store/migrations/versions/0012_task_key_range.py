"""Split tables (``split``): the key range a task reads, planned when the export is made.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision: str | None = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("key_range", sa.Text))  # JSON text


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("key_range")
