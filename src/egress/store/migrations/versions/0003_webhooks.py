"""Webhooks: a lease on outbox rows, retry rounds, every attempt recorded, secrets per project.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

Written out in full, like 0001: a migration is history. The new CHECK constraints on
``deliveries`` need a table rebuild on SQLite, hence the batch operation (plain ALTERs
on PostgreSQL).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None

ID = sa.String(40)
PROJECT = sa.String(64)
TIME: sa.Double[float] = sa.Double()
SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.add_column(sa.Column("lease_token", sa.String(64)))
        batch.add_column(sa.Column("round_started_at", TIME))
        batch.add_column(
            sa.Column("round_attempts", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.create_check_constraint(
            op.f("ck_deliveries_lease"), "lease_token IS NULL OR state = 'pending'"
        )
        batch.create_check_constraint(
            op.f("ck_deliveries_round"), "round_attempts >= 0 AND round_attempts <= attempts"
        )

    op.create_table(
        "delivery_attempts",
        sa.Column("id", SERIAL, nullable=False, autoincrement=True),
        sa.Column("delivery_id", ID, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("status_code", sa.Integer()),
        sa.Column("error", sa.Text()),
        sa.Column("duration", TIME, nullable=False),
        sa.Column("address", sa.String(64)),
        sa.Column("worker", sa.String(255)),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_attempts")),
        sa.ForeignKeyConstraint(
            ["delivery_id"], ["deliveries.id"],
            name=op.f("fk_delivery_attempts_delivery_id_deliveries"), ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "delivery_id", "attempt", name=op.f("uq_delivery_attempts_delivery_id_attempt")
        ),
        sa.CheckConstraint(
            "outcome IN ('success', 'failure', 'refused')",
            name=op.f("ck_delivery_attempts_outcome"),
        ),
        sa.CheckConstraint(
            "attempt >= 1 AND duration >= 0", name=op.f("ck_delivery_attempts_counts")
        ),
    )

    op.create_table(
        "webhook_secrets",
        sa.Column("id", ID, nullable=False),
        sa.Column("project", PROJECT, nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_secrets")),
        sa.ForeignKeyConstraint(
            ["project"], ["projects.id"], name=op.f("fk_webhook_secrets_project_projects")
        ),
        sa.UniqueConstraint(
            "project", "generation", name=op.f("uq_webhook_secrets_project_generation")
        ),
        sa.CheckConstraint("generation >= 1", name=op.f("ck_webhook_secrets_generation")),
    )


def downgrade() -> None:
    op.drop_table("webhook_secrets")
    op.drop_table("delivery_attempts")
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_constraint(op.f("ck_deliveries_round"), type_="check")
        batch.drop_constraint(op.f("ck_deliveries_lease"), type_="check")
        batch.drop_column("round_attempts")
        batch.drop_column("round_started_at")
        batch.drop_column("lease_token")
