"""Alembic environment: runs on the connection handed over by ``upgrade()``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from egress.store.migrations import LOCK_KEY, VERSION_TABLE
from egress.store.schema import metadata

connection: sa.Connection | None = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("egress migrations run through egress.store.migrations.upgrade()")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    # SQLite cannot ALTER most things in place: later revisions use batch operations.
    render_as_batch=connection.dialect.name == "sqlite",
)

with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        # Concurrent migrators wait here, then find the schema already current.
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
    context.run_migrations()
