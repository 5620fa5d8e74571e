"""Alembic migrations of the job store, run programmatically (no alembic.ini needed).

``upgrade(engine)`` brings the schema to the newest revision; it is idempotent and
safe to run from several processes at once (PostgreSQL: an advisory lock; SQLite:
``BEGIN IMMEDIATE``). The revision scripts ship inside the package (``versions/``).
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

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
