"""Applying every migration gives exactly the schema that ``schema.py`` declares."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from egress.store.migrations import (
    HEAD,
    HERE,
    LOCK_KEY,
    VERSION_TABLE,
    alembic_config,
    current_revisions,
)
from egress.store.schema import metadata
from egress.store.sql import SqlJobStore
from egress.store.writelock import WriteLock


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


def test_a_store_migrated_by_a_newer_egress_is_ready_and_left_alone(empty_url: str):
    """A rolling upgrade: the new version's migration ran first; pods of the old version
    starting or probing meanwhile find the schema current (migrations only add) and do
    not try to migrate from a revision they do not know."""
    store = SqlJobStore(empty_url)
    try:
        store.migrate()
        with store.engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = 'zz_newer'"))
        assert store.schema_current()
        store.migrate()  # nothing to do, no error
        with store.engine.connect() as conn:
            assert conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")
                                ).scalar() == "zz_newer"
        # behind is not current: an older revision this code knows
        with store.engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0009'"))
        assert not store.schema_current()
    finally:
        store.close()


def test_the_revisions_are_read_as_alembic_reads_them(empty_url: str):
    """``current_revisions`` stands in for Alembic's own read at every start."""
    store = SqlJobStore(empty_url)
    try:
        def both() -> tuple[frozenset[str], frozenset[str]]:
            with store.engine.connect() as conn:
                ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
                return current_revisions(conn), frozenset(ctx.get_current_heads())

        assert both() == (frozenset(), frozenset())  # before the first migration
        store.migrate()
        assert both() == ({HEAD}, {HEAD})
    finally:
        store.close()


def test_a_current_store_is_checked_without_alembic(empty_url: str):
    """Every worker, server and CLI command checks the schema at start; when it is
    current, Alembic (~0.1 s of start-up) is not even imported."""
    first = SqlJobStore(empty_url)
    try:
        first.migrate()
    finally:
        first.close()
    script = textwrap.dedent("""
        import sys
        from egress.store.sql import SqlJobStore
        store = SqlJobStore(sys.argv[1])
        store.migrate()
        print(store.schema_current(), "alembic" in sys.modules)
        store.close()
    """)
    ran = subprocess.run([sys.executable, "-c", script, empty_url], capture_output=True,
                         text=True, timeout=60, check=True)
    assert ran.stdout.split() == ["True", "False"], ran.stderr


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


#: Migrates one fresh store per round; a round starts when the go file for it appears,
#: so every process starts migrating it at once. Prints the errors of failed rounds.
MIGRATOR = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from egress.store.sql import SqlJobStore

    urls, go, me = sys.argv[1].split(","), Path(sys.argv[2]), sys.argv[3]
    failed = 0
    for round_, url in enumerate(urls):
        (go / f"{round_}.{me}.ready").touch()
        while not (go / f"{round_}.start").exists():
            time.sleep(0.002)
        store = SqlJobStore(url)
        try:
            store.migrate()
        except Exception as exc:
            failed += 1
            print(f"round {round_}: {exc}", file=sys.stderr)
        store.close()
    sys.exit(1 if failed else 0)
    """
)


def _migrate_at_once(urls: list[str], go: Path, processes: int) -> None:
    """``processes`` migrators; per url a round that releases them all at once."""
    go.mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", MIGRATOR, ",".join(urls), str(go), str(i)],
                         stderr=subprocess.PIPE, text=True)
        for i in range(processes)
    ]
    try:
        deadline = time.monotonic() + 300
        for round_ in range(len(urls)):
            for i, proc in enumerate(procs):
                while not (go / f"{round_}.{i}.ready").exists():
                    assert proc.poll() is None, proc.communicate()
                    assert time.monotonic() < deadline, "the migrators are stuck"
                    time.sleep(0.005)
            (go / f"{round_}.start").touch()
        errors = []
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                errors.extend(err.strip().splitlines() or [f"exit {proc.returncode}"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert errors == [], errors


def _assert_current(url: str) -> None:
    store = SqlJobStore(url)
    try:
        with store.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            assert ctx.get_current_revision() == ScriptDirectory(str(HERE)).get_current_head()
            assert compare_metadata(ctx, metadata) == []
    finally:
        store.close()


def test_concurrent_migrations_from_several_processes(empty_url: str, tmp_path: Path):
    """Every worker migrates at start: they must not trip over each other."""
    _migrate_at_once([empty_url], tmp_path / "go", 4)
    _assert_current(empty_url)


ROUNDS = 30


def test_simultaneous_first_migrations_of_a_fresh_sqlite_store(tmp_path: Path):
    """Workers started together on a new SQLite file: several rounds, many processes
    released at once, so that an unguarded migration collides in nearly every run."""
    urls = [f"sqlite:///{tmp_path / f'fresh{r}.db'}" for r in range(ROUNDS)]
    _migrate_at_once(urls, tmp_path / "go", 6)
    for url in urls:
        _assert_current(url)


@contextlib.contextmanager
def _a_writer_holds_the_store(url: str) -> Iterator[None]:
    """Another process's writer mid-transaction, and a migrator holding its lock."""
    if url.startswith("sqlite"):
        db = sa.make_url(url).database
        with WriteLock(Path(f"{db}-writelock")):
            raw = sqlite3.connect(db, isolation_level=None)
            try:
                raw.execute("BEGIN IMMEDIATE")
                yield
            finally:
                raw.close()
        return
    engine = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": LOCK_KEY})
            conn.commit()
            yield
    finally:
        engine.dispose()


def test_checking_a_current_schema_waits_for_no_writer(store_url: str):
    """Every worker migrates at start; with the schema current that is a read, and it
    must not wait for a writer (nor for a migrator) that holds the store."""
    store = SqlJobStore(store_url)
    done = threading.Event()
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            store.migrate()
        except BaseException as exc:  # reported below
            errors.append(exc)
        done.set()

    try:
        with _a_writer_holds_the_store(store_url):
            thread = threading.Thread(target=migrate)
            thread.start()
            # generous: a read takes milliseconds; the old code waited for the writer
            assert done.wait(8), "migrate() of a current schema waited for the writer"
        thread.join(60)
        assert errors == []
    finally:
        store.close()
