"""The job store: projects, exports, tasks, the lease log, the webhook outbox, the audit log.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Written out in full (not imported from schema.py): a migration is history and must not
change when the declared schema does. Names are final (``op.f``): the metadata's naming
convention must not be applied to them again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None

ID = sa.String(40)
PROJECT = sa.String(64)
TIME: sa.Double[float] = sa.Double()
SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", PROJECT, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
    )
    op.create_table(
        "exports",
        sa.Column("id", ID, nullable=False),
        sa.Column("project", PROJECT, nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("tables", sa.Text(), nullable=False),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("compression", sa.String(32), nullable=False),
        sa.Column("destination", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("request_hash", sa.String(128)),
        sa.Column("callback_url", sa.Text()),
        sa.Column("manifest", sa.Text()),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.Column("started_at", TIME),
        sa.Column("finished_at", TIME),
        sa.Column("max_duration", TIME),
        sa.Column("deadline_at", TIME),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("cleaned_at", TIME),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exports")),
        sa.ForeignKeyConstraint(
            ["project"], ["projects.id"], name=op.f("fk_exports_project_projects")
        ),
        sa.UniqueConstraint(
            "project", "idempotency_key", name=op.f("uq_exports_project_idempotency_key")
        ),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'completed', 'failed', 'cancelled')",
            name=op.f("ck_exports_state"),
        ),
        sa.CheckConstraint(
            "state IN ('queued', 'running') OR finished_at IS NOT NULL",
            name=op.f("ck_exports_finished"),
        ),
        sa.CheckConstraint(
            "state <> 'completed' OR manifest IS NOT NULL", name=op.f("ck_exports_manifest")
        ),
        sa.CheckConstraint(
            "max_duration IS NULL OR max_duration > 0", name=op.f("ck_exports_max_duration")
        ),
    )
    op.create_index("ix_exports_project_id", "exports", ["project", "id"])
    op.create_index("ix_exports_state_deadline_at", "exports", ["state", "deadline_at"])

    op.create_table(
        "tasks",
        sa.Column("id", ID, nullable=False),
        sa.Column("export_id", ID, nullable=False),
        sa.Column("project", PROJECT, nullable=False),
        sa.Column("table_name", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.Text()),
        sa.Column("checkpoint", sa.Text()),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("rows_estimate", sa.BigInteger()),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(255)),
        sa.Column("lease_token", sa.String(64)),
        sa.Column("lease_expires_at", TIME),
        sa.Column("run_after", TIME, nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.ForeignKeyConstraint(
            ["export_id"], ["exports.id"], name=op.f("fk_tasks_export_id_exports"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("export_id", "seq", name=op.f("uq_tasks_export_id_seq")),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed', 'cancelled')",
            name=op.f("ck_tasks_state"),
        ),
        sa.CheckConstraint(
            "(state = 'running' AND lease_token IS NOT NULL AND lease_owner IS NOT NULL"
            " AND lease_expires_at IS NOT NULL) OR (state <> 'running' AND lease_token IS NULL"
            " AND lease_owner IS NULL AND lease_expires_at IS NULL)",
            name=op.f("ck_tasks_lease"),
        ),
        sa.CheckConstraint(
            "rows >= 0 AND bytes >= 0 AND attempts >= 0 AND max_attempts >= 1",
            name=op.f("ck_tasks_counts"),
        ),
    )
    op.create_index("ix_tasks_claim", "tasks", ["state", "run_after", "created_at", "seq"])
    op.create_index("ix_tasks_state_project", "tasks", ["state", "project"])
    op.create_index("ix_tasks_state_lease_expires_at", "tasks", ["state", "lease_expires_at"])

    op.create_table(
        "task_events",
        sa.Column("id", SERIAL, nullable=False, autoincrement=True),
        sa.Column("task_id", ID, nullable=False),
        sa.Column("export_id", ID, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("lease_token", sa.String(64)),
        sa.Column("worker", sa.String(255)),
        sa.Column("at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_events")),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_events_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["export_id"], ["exports.id"], name=op.f("fk_task_events_export_id_exports"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "kind IN ('claim', 'commit', 'requeue', 'release', 'finish', 'fail', 'rescue',"
            " 'cancel')",
            name=op.f("ck_task_events_kind"),
        ),
    )
    op.create_index("ix_task_events_task_id_id", "task_events", ["task_id", "id"])
    op.create_index("ix_task_events_export_id_id", "task_events", ["export_id", "id"])

    op.create_table(
        "deliveries",
        sa.Column("id", ID, nullable=False),
        sa.Column("export_id", ID, nullable=False),
        sa.Column("project", PROJECT, nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TIME, nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
        sa.ForeignKeyConstraint(
            ["export_id"], ["exports.id"], name=op.f("fk_deliveries_export_id_exports"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "state IN ('pending', 'delivered', 'failed')", name=op.f("ck_deliveries_state")
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_deliveries_attempts")),
    )
    op.create_index(
        "ix_deliveries_state_next_attempt_at", "deliveries", ["state", "next_attempt_at"]
    )
    op.create_index("ix_deliveries_export_id", "deliveries", ["export_id"])

    op.create_table(
        "audit_log",
        sa.Column("id", SERIAL, nullable=False, autoincrement=True),
        sa.Column("project", PROJECT, nullable=False),
        sa.Column("token_id", sa.String(64)),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("export_id", ID),
        sa.Column("client_address", sa.String(64)),
        sa.Column("at", TIME, nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_project_id", "audit_log", ["project", "id"])


def downgrade() -> None:
    for table in ("audit_log", "deliveries", "task_events", "tasks", "exports", "projects"):
        op.drop_table(table)
