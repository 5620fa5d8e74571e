"""Failed exports: the detail of the failure beside the plain ``error`` API callers see.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN: SQLite and PostgreSQL both do it in place
    op.add_column("exports", sa.Column("error_detail", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("error_detail")
