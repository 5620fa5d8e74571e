"""Alembic migrations of the job store, run programmatically (no alembic.ini needed).

``upgrade(engine)`` brings the schema to the newest revision; it is idempotent. Several
processes may migrate at once only behind a lock that spans the whole upgrade
(PostgreSQL: the advisory lock taken in ``env.py``; SQLite: the store's write-lock file,
taken by ``SqlCore.migrate``), because Alembic reads the version once and then commits
each revision on its own. ``is_current(conn)`` tells, by reading only, whether there
is anything to do. The revision scripts ship inside the package (``versions/``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

HERE = Path(__file__).parent
#: Not ``alembic_version``: the store may share a database with an application's own.
VERSION_TABLE = "egress_schema_version"
#: Key of the PostgreSQL advisory lock held while migrating.
LOCK_KEY = 0x6567726573730001


def alembic_config(connection: sa.Connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), revision)


@functools.cache
def heads() -> frozenset[str]:
    """The newest revision(s) shipped with this code (reading the scripts costs ms)."""
    return frozenset(ScriptDirectory(str(HERE)).get_heads())


@functools.cache
def known() -> frozenset[str]:
    """Every revision shipped with this code."""
    return frozenset(s.revision for s in ScriptDirectory(str(HERE)).walk_revisions())


def is_current(conn: sa.Connection) -> bool:
    """Whether the schema is at this code's newest revision or past it; only reads (give
    it a read-only connection and it waits for no writer).

    Past it: a newer egress migrated the store (revisions this code does not know) during
    a rolling upgrade. Migrations only add, so this code runs on that schema: it is ready,
    and has nothing to migrate (Alembic could not go from a revision it does not know)."""
    ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    current = frozenset(ctx.get_current_heads())
    return current == heads() or bool(current - known())
