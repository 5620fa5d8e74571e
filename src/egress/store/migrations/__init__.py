"""Alembic migrations of the job store, run programmatically (no alembic.ini needed).

``upgrade(engine)`` brings the schema to the newest revision; it is idempotent. Several
processes may migrate at once only behind a lock that spans the whole upgrade
(PostgreSQL: the advisory lock taken in ``env.py``; SQLite: the store's write-lock file,
taken by ``SqlCore.migrate``), because Alembic reads the version once and then commits
each revision on its own. ``is_current(conn)`` tells, by reading only, whether there
is anything to do. The revision scripts ship inside the package (``versions/``).

Alembic is imported only when there is something to migrate, or a version this code
does not expect to find: every worker, server and CLI command checks the schema at
start, and Alembic's import was ~0.1 s of it (``HEAD`` answers the usual case).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from alembic.config import Config

HERE = Path(__file__).parent
#: Not ``alembic_version``: the store may share a database with an application's own.
VERSION_TABLE = "egress_schema_version"
#: Key of the PostgreSQL advisory lock held while migrating.
LOCK_KEY = 0x6567726573730001
#: The newest revision in ``versions/``: a new revision changes it too (a unit test
#: compares it with Alembic's heads).
HEAD = "0012"


def alembic_config(connection: sa.Connection) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    from alembic import command

    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), revision)


@functools.cache
def heads() -> frozenset[str]:
    """The newest revision(s) shipped with this code (reading the scripts costs ms)."""
    from alembic.script import ScriptDirectory

    return frozenset(ScriptDirectory(str(HERE)).get_heads())


@functools.cache
def known() -> frozenset[str]:
    """Every revision shipped with this code."""
    from alembic.script import ScriptDirectory

    return frozenset(s.revision for s in ScriptDirectory(str(HERE)).walk_revisions())


def current_revisions(conn: sa.Connection) -> frozenset[str]:
    """The revision(s) the store's schema is at; none before the first migration. Read
    as Alembic reads them (the version table, when there is one), without Alembic."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return frozenset()
    version = sa.table(VERSION_TABLE, sa.column("version_num", sa.String))
    return frozenset(conn.execute(sa.select(version.c.version_num)).scalars())


def is_current(conn: sa.Connection) -> bool:
    """Whether the schema is at this code's newest revision or past it; only reads (give
    it a read-only connection and it waits for no writer).

    Past it: a newer egress migrated the store (revisions this code does not know) during
    a rolling upgrade. Migrations only add, so this code runs on that schema: it is ready,
    and has nothing to migrate (Alembic could not go from a revision it does not know)."""
    current = current_revisions(conn)
    if current == {HEAD}:
        return True
    return current == heads() or bool(current - known())
