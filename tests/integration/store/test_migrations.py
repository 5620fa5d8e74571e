"""Applying every migration gives exactly the schema that ``schema.py`` declares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from egress.store.migrations import HERE, VERSION_TABLE, alembic_config
from egress.store.schema import metadata
from egress.store.sql import SqlJobStore


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("pg_url")  # a fresh, empty database


def _check_constraints(conn: sa.Connection) -> dict[str, set[str]]:
    inspector = sa.inspect(conn)
    return {
        table: {c["name"] for c in inspector.get_check_constraints(table)}
        for table in metadata.tables
    }


def test_migrations_produce_the_declared_schema(empty_url: str):
    store = SqlJobStore(empty_url)
    try:
        store.migrate()
        with store.engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            assert compare_metadata(ctx, metadata) == []
            # Autogenerate does not compare CHECK constraints: compare them by name.
            declared = {
                table.name: {
                    c.name for c in table.constraints if isinstance(c, sa.CheckConstraint)
                }
                for table in metadata.sorted_tables
            }
            assert _check_constraints(conn) == declared
            assert sum(len(names) for names in declared.values()) >= 8
            head = ScriptDirectory(str(HERE)).get_current_head()
            assert ctx.get_current_revision() == head
            assert VERSION_TABLE in sa.inspect(conn).get_table_names()
    finally:
        store.close()


def test_migrate_is_idempotent_and_keeps_data(empty_url: str, export_request):
    store = SqlJobStore(empty_url)
    try:
        store.migrate()
        record, _ = store.export_create(*export_request())
        store.migrate()
        assert store.export_get("p", record.id) == record
    finally:
        store.close()


def test_check_constraints_hold_in_the_database(empty_url: str, export_request):
    """The lease invariant is the schema's too: a running task without a token is refused."""
    store = SqlJobStore(empty_url)
    try:
        store.migrate()
        record, _ = store.export_create(*export_request())
        with store.engine.connect() as conn, pytest.raises(sa.exc.IntegrityError):
            conn.execute(sa.text("UPDATE tasks SET state = 'running' WHERE export_id = :e"),
                         {"e": record.id})
        with store.engine.connect() as conn, pytest.raises(sa.exc.IntegrityError):
            conn.execute(sa.text("UPDATE exports SET state = 'lost' WHERE id = :e"),
                         {"e": record.id})
    finally:
        store.close()


def test_downgrade_removes_everything(empty_url: str):
    from alembic import command

    store = SqlJobStore(empty_url)
    try:
        store.migrate()
        with store.engine.connect() as conn:
            command.downgrade(alembic_config(conn), "base")
            assert set(sa.inspect(conn).get_table_names()) <= {VERSION_TABLE}
    finally:
        store.close()


def test_concurrent_migrations_from_several_processes(empty_url: str):
    """Every worker migrates at start: they must not trip over each other."""
    code = (
        "import sys; from egress.store.sql import SqlJobStore; "
        "SqlJobStore(sys.argv[1]).migrate()"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, empty_url], stderr=subprocess.PIPE,
                         text=True)
        for _ in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    store = SqlJobStore(empty_url)
    try:
        with store.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            assert ctx.get_current_revision() == ScriptDirectory(str(HERE)).get_current_head()
            assert compare_metadata(ctx, metadata) == []
    finally:
        store.close()
