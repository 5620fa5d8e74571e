"""API tokens: hashed, scoped, per project, revocable.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Written out in full, like 0001: a migration is history.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None

ID = sa.String(40)
PROJECT = sa.String(64)
TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", ID, nullable=False),
        sa.Column("project", PROJECT, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("last_used_at", TIME),
        sa.Column("revoked_at", TIME),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.ForeignKeyConstraint(
            ["project"], ["projects.id"], name=op.f("fk_api_tokens_project_projects")
        ),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index("ix_api_tokens_project_id", "api_tokens", ["project", "id"])


def downgrade() -> None:
    op.drop_table("api_tokens")
