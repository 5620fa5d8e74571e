"""Exports record the API token that created them (shown to users; the audit log has
the rest of what that token did).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("exports", sa.Column("created_by", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("created_by")
