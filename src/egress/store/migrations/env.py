"""Alembic environment: runs on the connection handed over by ``upgrade()``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from egress.store.dialect import PG_LOCK_TIMEOUT_MS
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
        # A migration is not a store transaction of milliseconds: between its statements
        # the client reflects tables and builds the next ALTER, which on a loaded machine
        # (workers starting together) can exceed the store's idle-in-transaction limit;
        # and a migrator waits for another one as long as that one takes.
        connection.execute(sa.text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        connection.execute(sa.text("SET LOCAL lock_timeout = 0"))
        # Concurrent migrators wait here, then find the schema already current.
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
        # the schema changes themselves give up rather than queue the workers' queries
        connection.execute(sa.text(f"SET LOCAL lock_timeout = {PG_LOCK_TIMEOUT_MS}"))
    context.run_migrations()
