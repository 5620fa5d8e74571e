"""Consistent snapshots (``snapshot: true``): the exported snapshot an export reads, the
worker whose session holds it, and when it was taken.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels = None
depends_on = None

TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.add_column(sa.Column("snapshot_id", sa.String(64)))
        batch.add_column(sa.Column("snapshot_owner", sa.String(255)))
        batch.add_column(sa.Column("snapshot_at", TIME))
        batch.create_check_constraint(
            op.f("ck_exports_snapshot"),
            sa.text("(snapshot_id IS NULL) = (snapshot_owner IS NULL)"
                    " AND (snapshot_id IS NULL) = (snapshot_at IS NULL)"))


def downgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.drop_constraint(op.f("ck_exports_snapshot"), type_="check")
        batch.drop_column("snapshot_at")
        batch.drop_column("snapshot_owner")
        batch.drop_column("snapshot_id")
