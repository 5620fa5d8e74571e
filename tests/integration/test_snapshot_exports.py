"""``snapshot: true`` below the acceptance test: the store's conditional record, racing
coordinators, a snapshot that is gone, the option's checks and refusals (API, CLI, jobs
on SQLite), and the one-shot SQLite snapshot (one read transaction for the run)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from egress.cli import main
from egress.config import Settings
from egress.domain.checkpoint import Checkpoint
from egress.domain.ids import new_id
from egress.domain.jobs import ExportRecord, ExportState
from egress.exceptions import ConfigError, SnapshotLostError, SourceError
from egress.manager import ExportRequest, create_export
from egress.oneshot import export as oneshot_export
from egress.sources.pg_snapshot import SnapshotSession
from egress.sources.postgres import PostgresSource
from egress.store.sql import SqlJobStore
from egress.worker.snapshot import SnapshotCoordinators
from jobsharness import make_events_db, wait_until, write_home


def _record(source: str = "main") -> ExportRecord:
    return ExportRecord(id=new_id("exp"), project="p", source=source, tables=("t",),
                        format="csv", compression="none", destination="local",
                        state=ExportState.QUEUED, options={"snapshot": True})


def test_a_snapshot_is_recorded_once_and_a_retry_clears_it(store_url: str) -> None:
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        export, _ = store.export_create(_record(), [])
        assert store.export_snapshot_set(export.id, "00000003-0000001B-1", "w1") is True
        assert store.export_snapshot_set(export.id, "00000004-0000001C-1", "w2") is False
        got = store.export_get(None, export.id)
        assert got is not None and got.snapshot_id == "00000003-0000001B-1"
        assert got.snapshot_owner == "w1" and got.snapshot_at is not None
        assert store.export_fail(export.id, "lost")
        # an export that ended takes no snapshot
        other, _ = store.export_create(_record(), [])
        store.export_cancel("p", other.id)
        assert store.export_snapshot_set(other.id, "00000005-0000001D-1", "w1") is False
        retried = store.export_retry("p", export.id)
        assert retried is not None and retried.snapshot_id is None
        assert retried.snapshot_owner is None and retried.snapshot_at is None
    finally:
        store.close()


def _pg_settings(tmp_path: Path, store_url: str, source_url: str) -> Settings:
    return write_home(tmp_path / "home", store_url=store_url, sources={"main": source_url},
                      worker={"heartbeat_seconds": 0.2})


def _holders(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                           "WHERE application_name = 'egress snapshot'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.postgres
def test_racing_coordinators_record_one_snapshot_and_the_loser_lets_go(
    tmp_path: Path, pg_server: Any
) -> None:
    source_url = pg_server.create_database("snap_race_src")
    store_url = pg_server.create_database("snap_race_store")
    settings = _pg_settings(tmp_path, store_url, source_url)
    store = SqlJobStore(store_url)
    stopping = threading.Event()
    sides = [SnapshotCoordinators(store, settings, f"worker-{i}", stopping) for i in range(2)]
    try:
        store.migrate()
        export, _ = store.export_create(_record(), [])
        start = threading.Barrier(2)
        got: list[ExportRecord | None] = [None, None]

        def take(i: int) -> None:
            start.wait()
            got[i] = sides[i].snapshot_of(export)

        threads = [threading.Thread(target=take, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert got[0] is not None and got[1] is not None
        assert got[0].snapshot_id == got[1].snapshot_id is not None
        owner = got[0].snapshot_owner
        assert owner in ("worker-0", "worker-1")
        # the winner holds it; the loser lets go (its thread ends once its session has
        # rolled back and closed: a round trip after the race is decided)
        assert wait_until(lambda: [len(s.held()) for s in sides] in ([1, 0], [0, 1]), 10), (
            [s.held() for s in sides])
        assert wait_until(lambda: _holders(source_url) == 1, 10)
        # the export ends: its coordinator ends the session within a heartbeat or two
        store.export_cancel("p", export.id)
        assert wait_until(lambda: _holders(source_url) == 0, 10)
        assert all(s.held() == [] for s in sides)
    finally:
        stopping.set()
        for side in sides:  # no session left open for a later test's garbage collection
            side.close(10)
        store.close()


@pytest.mark.postgres
def test_a_read_in_a_snapshot_that_is_gone_fails_naming_the_coordinator(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t SELECT generate_series(1, 10)")
    source = PostgresSource(pg_url)
    try:
        info = source.describe("t")
        with SnapshotSession(pg_url) as session:
            conn2 = psycopg.connect(pg_url, autocommit=True)
            conn2.execute("INSERT INTO t VALUES (11)")
            conn2.close()
            source.use_snapshot(session.id, "host:1:abc")
            rows = sum(b.num_rows for b in source.read(info, None, 100))
            assert rows == 10  # not the row inserted after the snapshot
            # a split is planned in the snapshot too: the rows the ranges will read
            assert source.key_at_rows(info, lambda rows: [rows // 2]) == (10, ["5"])
            assert source.split_points(info, 2) == ["5"]
        with pytest.raises(SnapshotLostError, match="worker host:1:abc"):
            source.key_at_rows(info, lambda rows: [1])
        with pytest.raises(SnapshotLostError) as lost:
            list(source.read(info, None, 100))
        assert f"snapshot {session.id} is gone" in str(lost.value)
        assert "worker host:1:abc" in str(lost.value)
        assert "retry the export" in str(lost.value)
        with pytest.raises(SourceError, match="not a PostgreSQL snapshot id"):
            source.use_snapshot("1'; DROP TABLE t; --")
    finally:
        source.close()


@pytest.mark.postgres
def test_the_option_is_checked_and_refused_where_no_snapshot_can_be_shared(
    tmp_path: Path, pg_server: Any
) -> None:
    source_url = pg_server.create_database("snap_opt_src")
    with psycopg.connect(source_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    lite = make_events_db(tmp_path / "lite.db", {"t": 10})
    settings = write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 'store.db'}",
                          sources={"main": source_url, "lite": lite}, worker={})
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        made, _ = create_export(store, settings, ExportRequest(
            source="main", tables=("t",), options={"snapshot": True}))
        assert made.options == {"snapshot": True}
        plain, _ = create_export(store, settings, ExportRequest(
            source="main", tables=("t",), options={"snapshot": False}))
        assert plain.options == {}
        with pytest.raises(ConfigError, match="snapshot must be true or false"):
            create_export(store, settings, ExportRequest(
                source="main", tables=("t",), options={"snapshot": "yes"}))
        # the server's CSV (one COPY per slice) does not read in the snapshot yet
        with pytest.raises(ConfigError, match="cannot be combined with csv_dialect postgres"):
            create_export(store, settings, ExportRequest(
                source="main", tables=("t",), format="csv",
                options={"snapshot": True, "csv_dialect": "postgres"}))
        with pytest.raises(ConfigError) as refused:
            create_export(store, settings, ExportRequest(
                source="lite", tables=("t",), options={"snapshot": True}))
        assert "needs a PostgreSQL source" in str(refused.value)
        assert "egress export --snapshot" in str(refused.value)
    finally:
        store.close()
    runner = CliRunner()
    env = {"EGRESS_HOME": str(settings.home)}
    made_cli = runner.invoke(main, ["jobs", "create", "--source", "main", "--table", "t",
                                    "--snapshot", "--json"], env=env)
    assert made_cli.exit_code == 0, made_cli.output
    refused_cli = runner.invoke(main, ["jobs", "create", "--source", "lite", "--table", "t",
                                       "--snapshot"], env=env)
    assert refused_cli.exit_code == 2 and "needs a PostgreSQL source" in refused_cli.output


_WRITE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=5)
conn.execute("UPDATE a SET kind = 'changed' WHERE id <= 50")
conn.execute("DELETE FROM b WHERE id > 100")
conn.execute("INSERT INTO b (id, kind) VALUES (100000, 'new')")
conn.commit()
"""


class _WriteAfterTheStart:
    """Progress that changes both tables (from another process) after the run started,
    before its first row is read."""

    def __init__(self, db: Path) -> None:
        self.db, self.wrote = db, False

    def table_started(self, table: str, rows_estimate: int | None, cp: Checkpoint) -> None:
        if not self.wrote:
            subprocess.run([sys.executable, "-c", _WRITE, str(self.db)], check=True)
            self.wrote = True

    def advanced(self, table: str, cp: Checkpoint) -> None:
        pass

    def table_done(self, table: str, cp: Checkpoint) -> None:
        pass


def _rows(out: Path, table: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / f"{table}.jsonl").read_text().splitlines()]


def test_a_one_shot_sqlite_snapshot_reads_every_table_in_one_read_transaction(
    tmp_path: Path
) -> None:
    db = tmp_path / "src.db"
    make_events_db(db, {"a": 3000, "b": 3000})
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode = wal")  # writers go on beside the held read
    progress = _WriteAfterTheStart(db)
    result = oneshot_export(f"sqlite:///{db}", ["a", "b"], to=tmp_path / "out",
                            format="jsonl", part_rows=100, slice_seconds=60,
                            snapshot=True, progress=progress)
    assert progress.wrote
    a, b = _rows(tmp_path / "out", "a"), _rows(tmp_path / "out", "b")
    assert [r["id"] for r in b] == list(range(1, 3001))  # the deletes and the insert: not seen
    assert not any(r["kind"] == "changed" for r in a)
    assert result.manifest is not None
    assert result.manifest["snapshot"]["id"] is None
    assert result.manifest["snapshot"]["taken_at"]
    # the changes are there for a new reader (without --snapshot the run would see them:
    # the source's connection begins its read transaction at the first row it reads)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM b").fetchone() == (101,)


def test_one_shot_snapshot_refusals(tmp_path: Path) -> None:
    db = make_events_db(tmp_path / "src.db", {"a": 10})
    with pytest.raises(ConfigError, match="cannot be resumed"):
        oneshot_export(db, ["a"], to=tmp_path / "out", snapshot=True, resume=True)
    with pytest.raises(ConfigError, match="cannot be combined with csv_dialect postgres"):
        oneshot_export(db, ["a"], to=tmp_path / "out", snapshot=True,
                       options={"csv_dialect": "postgres"})
    with pytest.raises(ConfigError, match="a query on SQLite cannot be"):
        oneshot_export(db, query="SELECT id FROM a", key=["id"], to=tmp_path / "q",
                       snapshot=True)
