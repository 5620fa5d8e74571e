"""The job store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

Invariants live in the schema as well as in the code: states are CHECK-constrained
strings, a task holds a lease exactly while it is running, counters are never negative.
Times are seconds since the epoch (double precision) from the database's clock.
JSON values are stored as text, so both dialects keep them byte for byte.

The migrations in ``migrations/versions`` must produce exactly these tables;
``tests/integration/store/test_migrations.py`` checks it.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from egress.domain.jobs import ExportState, TaskState

EXPORT_STATES = tuple(s.value for s in ExportState)
TASK_STATES = tuple(s.value for s in TaskState)
EVENT_KINDS = ("claim", "commit", "requeue", "release", "finish", "fail", "rescue", "cancel")
DELIVERY_STATES = ("pending", "delivered", "failed")
ATTEMPT_OUTCOMES = ("success", "failure", "refused")

ID = sa.String(40)
PROJECT = sa.String(64)
TIME: sa.Double[float] = sa.Double()
# SQLite only auto-increments an INTEGER PRIMARY KEY.
SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class JsonText(sa.TypeDecorator[Any]):
    """A JSON value kept as compact text (key order preserved)."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


def in_list(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("id", PROJECT, primary_key=True),
    sa.Column("created_at", TIME, nullable=False),
)

exports = sa.Table(
    "exports",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("project", PROJECT, sa.ForeignKey("projects.id"), nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("tables", JsonText, nullable=False),
    sa.Column("format", sa.String(32), nullable=False),
    sa.Column("compression", sa.String(32), nullable=False),
    sa.Column("destination", sa.String(128), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("options", JsonText, nullable=False),
    sa.Column("error", sa.Text),
    #: The failure's detail (credentials masked) behind the plain ``error``: admins only.
    sa.Column("error_detail", sa.Text),
    sa.Column("idempotency_key", sa.String(255)),
    sa.Column("request_hash", sa.String(128)),
    sa.Column("callback_url", sa.Text),
    #: the API token that created it (None: the CLI or the library)
    sa.Column("created_by", sa.String(64)),
    sa.Column("manifest", JsonText),
    sa.Column("created_at", TIME, nullable=False),
    sa.Column("updated_at", TIME, nullable=False),
    sa.Column("started_at", TIME),
    sa.Column("finished_at", TIME),
    sa.Column("max_duration", TIME),
    #: created_at (or the last retry) + max_duration: the reconciler fails it after this.
    sa.Column("deadline_at", TIME),
    #: Cancelled or failed while tasks were still running: they stop at their next heartbeat.
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    #: When the outputs of a cancelled/failed export were removed (a retry starts over).
    sa.Column("cleaned_at", TIME),
    #: When the files of a completed export were removed after the retention period (0004).
    sa.Column("expired_at", TIME),
    #: ``snapshot: true`` (0011): the exported snapshot every task reads, the worker whose
    #: session holds it, and when it was taken; all three set together, once per run.
    sa.Column("snapshot_id", sa.String(64)),
    sa.Column("snapshot_owner", sa.String(255)),
    sa.Column("snapshot_at", TIME),
    sa.UniqueConstraint("project", "idempotency_key"),
    sa.CheckConstraint(in_list("state", EXPORT_STATES), name="state"),
    sa.CheckConstraint(
        "state IN ('queued', 'running') OR finished_at IS NOT NULL", name="finished"
    ),
    sa.CheckConstraint("state <> 'completed' OR manifest IS NOT NULL", name="manifest"),
    sa.CheckConstraint("max_duration IS NULL OR max_duration > 0", name="max_duration"),
    sa.CheckConstraint("(snapshot_id IS NULL) = (snapshot_owner IS NULL)"
                       " AND (snapshot_id IS NULL) = (snapshot_at IS NULL)", name="snapshot"),
    sa.Index(None, "project", "id"),
    sa.Index(None, "state", "deadline_at"),
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column(
        "export_id", ID, sa.ForeignKey("exports.id", ondelete="CASCADE"), nullable=False
    ),
    # Copied from the export: fair claiming groups by project without a join.
    sa.Column("project", PROJECT, nullable=False),
    sa.Column("table_name", sa.Text, nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("spec", JsonText),
    sa.Column("checkpoint", JsonText),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("rows_estimate", sa.BigInteger),
    #: failures since the task last made progress (a committed part resets it)
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    #: every failure of the task, progress or not (shown to users)
    sa.Column("failures", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("lease_owner", sa.String(255)),
    sa.Column("lease_token", sa.String(64)),
    sa.Column("lease_expires_at", TIME),
    sa.Column("run_after", TIME, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("created_at", TIME, nullable=False),
    sa.Column("updated_at", TIME, nullable=False),
    # remote engines (0009): the polling state of a submitted query
    sa.Column("remote_mode", sa.String(16)),
    sa.Column("query_id", sa.String(128)),
    sa.Column("next_uri", sa.Text),
    sa.Column("poll_count", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("next_poll_at", TIME),
    sa.Column("submitted_at", TIME),
    sa.Column("polled_at", TIME),
    sa.Column("claimed_at", TIME),
    sa.Column("result_columns", JsonText),
    sa.Column("remote_note", sa.Text),
    # split tables (0012): the key range a range task reads (domain/ranges.py), or NULL
    sa.Column("key_range", JsonText),
    sa.UniqueConstraint("export_id", "seq"),
    sa.CheckConstraint(in_list("state", TASK_STATES), name="state"),
    # A lease exists exactly while the task runs: fencing relies on it.
    sa.CheckConstraint(
        "(state = 'running' AND lease_token IS NOT NULL AND lease_owner IS NOT NULL"
        " AND lease_expires_at IS NOT NULL) OR (state <> 'running' AND lease_token IS NULL"
        " AND lease_owner IS NULL AND lease_expires_at IS NULL)",
        name="lease",
    ),
    sa.CheckConstraint(
        "rows >= 0 AND bytes >= 0 AND attempts >= 0 AND max_attempts >= 1", name="counts"
    ),
    # The claim scans queued tasks in this order.
    sa.Index("ix_tasks_claim", "state", "run_after", "created_at", "seq"),
    # the poll pass takes submitted tasks that are due (0009)
    sa.Index("ix_tasks_due", "state", "next_poll_at"),
    # A project's oldest ready tasks in claim order, read by the claim per project (0005;
    # it also serves the running count by project that the (state, project) index did).
    sa.Index("ix_tasks_ready", "state", "project", "run_after", "created_at", "seq", "id"),
    # a project's newest claim, read by the claim to serve projects in turn (0010)
    sa.Index("ix_tasks_project_claimed", "project", "claimed_at"),
    sa.Index(None, "state", "lease_expires_at"),
)

task_events = sa.Table(
    "task_events",
    metadata,
    sa.Column("id", SERIAL, primary_key=True, autoincrement=True),
    sa.Column("task_id", ID, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    sa.Column(
        "export_id", ID, sa.ForeignKey("exports.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("lease_token", sa.String(64)),
    sa.Column("worker", sa.String(255)),
    sa.Column("at", TIME, nullable=False),
    sa.CheckConstraint(in_list("kind", EVENT_KINDS), name="kind"),
    sa.Index(None, "task_id", "id"),
    sa.Index(None, "export_id", "id"),
)

# The webhook outbox: rows are written in the transaction that ends the export.
deliveries = sa.Table(
    "deliveries",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column(
        "export_id", ID, sa.ForeignKey("exports.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("project", PROJECT, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("payload", JsonText, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", TIME, nullable=False),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", TIME, nullable=False),
    sa.Column("updated_at", TIME, nullable=False),
    # Set while a worker sends it; next_attempt_at is then the end of that worker's lease,
    # so a delivery whose sender died becomes due again (0003).
    sa.Column("lease_token", sa.String(64)),
    # When the current retry round began (NULL: created_at); a replay starts a new one.
    sa.Column("round_started_at", TIME),
    sa.Column("round_attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.CheckConstraint(in_list("state", DELIVERY_STATES), name="state"),
    sa.CheckConstraint("attempts >= 0", name="attempts"),
    sa.CheckConstraint("lease_token IS NULL OR state = 'pending'", name="lease"),
    sa.CheckConstraint("round_attempts >= 0 AND round_attempts <= attempts", name="round"),
    sa.Index(None, "state", "next_attempt_at"),
    sa.Index(None, "export_id"),
)

# Every attempt of a delivery, written with the delivery's new state (0003).
delivery_attempts = sa.Table(
    "delivery_attempts",
    metadata,
    sa.Column("id", SERIAL, primary_key=True, autoincrement=True),
    sa.Column(
        "delivery_id", ID, sa.ForeignKey("deliveries.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("at", TIME, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("status_code", sa.Integer),
    sa.Column("error", sa.Text),
    sa.Column("duration", TIME, nullable=False),
    sa.Column("address", sa.String(64)),
    sa.Column("worker", sa.String(255)),
    sa.UniqueConstraint("delivery_id", "attempt"),
    sa.CheckConstraint(in_list("outcome", ATTEMPT_OUTCOMES), name="outcome"),
    sa.CheckConstraint("attempt >= 1 AND duration >= 0", name="counts"),
)

# Webhook signing secrets per project (0003). The newest generation signs for ever;
# a rotation gives the older ones an expiry, and they sign too until then.
webhook_secrets = sa.Table(
    "webhook_secrets",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("project", PROJECT, sa.ForeignKey("projects.id"), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("secret", sa.Text, nullable=False),
    sa.Column("created_at", TIME, nullable=False),
    sa.Column("expires_at", TIME),
    sa.UniqueConstraint("project", "generation"),
    sa.CheckConstraint("generation >= 1", name="generation"),
)

# API tokens: only the SHA-256 of a token is kept; revoking sets revoked_at (rows stay,
# so the audit log's token ids keep their meaning).
api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("project", PROJECT, sa.ForeignKey("projects.id"), nullable=False),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False),
    sa.Column("scopes", JsonText, nullable=False),
    sa.Column("created_at", TIME, nullable=False),
    sa.Column("last_used_at", TIME),
    sa.Column("revoked_at", TIME),
    sa.UniqueConstraint("token_hash"),
    sa.Index(None, "project", "id"),
)

# No foreign key to exports: the audit trail outlives deleted exports.
audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", SERIAL, primary_key=True, autoincrement=True),
    sa.Column("project", PROJECT, nullable=False),
    sa.Column("token_id", sa.String(64)),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("export_id", ID),
    sa.Column("client_address", sa.String(64)),
    sa.Column("at", TIME, nullable=False),
    sa.Column("details", JsonText, nullable=False),
    sa.Index(None, "project", "id"),
)
