"""Consistent snapshots (``snapshot: true``) with real ``egress worker`` processes and a
real PostgreSQL source that changes while the export runs (docs/jobs.md, Consistency).

A writer thread numbers its transactions 1, 2, 3…; transaction n inserts a row into both
tables, updates a row of each and deletes a row of each, and every row it writes carries
``v = n``. It keeps the log of what it did, so the state of both tables after any n can
be replayed. A snapshot export must equal that state for one n (the largest ``v`` in the
output: transaction n inserted rows that no later transaction in the snapshot can hide);
an export without snapshot only promises that rows nobody touched appear exactly once.
Killing the coordinator's worker fails the export with the documented message.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from egress.config import Settings
from egress.domain.jobs import ExportRecord, ExportState
from egress.manager import ExportRequest, create_export, export_root, retry_export
from egress.store.sql import SqlJobStore
from jobsharness import start_worker, stop, wait_until, write_home
from pgserver import PgServer

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
TABLES = ("accounts", "entries")
ROWS = 6000
SEED = 20261126

_NAMES = itertools.count()
Log = list[tuple[int, str, str, int]]  # (n, table, insert | update | delete, id)


def _make_source(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v bigint NOT NULL, "
                         "note text NOT NULL)")
            conn.execute(f"INSERT INTO {table} SELECT i, 0, 'row ' || i "
                         f"FROM generate_series(1, {ROWS}) AS i")


class Writer(threading.Thread):
    """Transactions 1, 2, 3…, each touching both tables, until told to stop."""

    def __init__(self, url: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.url, self.rng = url, random.Random(seed)
        self.log: Log = []
        self.n = 0
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._live = {t: set(range(1, ROWS + 1)) for t in TABLES}
        self._next = {t: ROWS + 1 for t in TABLES}

    def run(self) -> None:
        try:
            with psycopg.connect(self.url) as conn:
                while not self.done.is_set():
                    self._one(conn)
                    time.sleep(0.005)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _one(self, conn: psycopg.Connection[Any]) -> None:
        n = self.n + 1
        entries: Log = []
        with conn.transaction():
            for table in TABLES:
                live = self._live[table]
                new = self._next[table]
                conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 'new')", (new, n))
                updated, deleted = self.rng.sample(sorted(live), 2)
                conn.execute(f"UPDATE {table} SET v = %s, note = 'changed' WHERE id = %s",
                             (n, updated))
                conn.execute(f"DELETE FROM {table} WHERE id = %s", (deleted,))
                entries += [(n, table, "insert", new), (n, table, "update", updated),
                            (n, table, "delete", deleted)]
        for _, table, op, key in entries:  # committed: now part of the history
            if op == "insert":
                self._live[table].add(key)
                self._next[table] = key + 1
            elif op == "delete":
                self._live[table].discard(key)
        self.log += entries
        self.n = n


def state_after(log: Log, n: int) -> dict[str, dict[int, int]]:
    """id → v of every row of each table after transaction ``n``."""
    state = {t: dict.fromkeys(range(1, ROWS + 1), 0) for t in TABLES}
    for m, table, op, key in log:
        if m > n:
            break
        if op == "delete":
            state[table].pop(key, None)
        else:
            state[table][key] = m
    return state


def exported(settings: Settings, export: ExportRecord) -> dict[str, list[tuple[int, int]]]:
    """(id, v) of each table's rows in the export's output, in file order."""
    root = export_root(settings, export)
    manifest = json.loads((root / "manifest.json").read_text())
    out: dict[str, list[tuple[int, int]]] = {t: [] for t in TABLES}
    for entry in manifest["files"]:
        for line in (root / entry["name"]).read_text().splitlines():
            row = json.loads(line)
            out[entry["table"]].append((int(row["id"]), int(row["v"])))
    return out


@pytest.fixture
def setup(tmp_path: Path, pg_server: PgServer, request: pytest.FixtureRequest
          ) -> Iterator[tuple[Settings, SqlJobStore, str]]:
    name = f"snap_{next(_NAMES)}"
    source_url = pg_server.create_database(f"src_{name}")
    store_url = pg_server.create_database(f"store_{name}")
    _make_source(source_url)
    settings = write_home(
        tmp_path / "home", store_url=store_url, sources={"main": source_url},
        # a pause after each page keeps the export running for seconds, in many slices
        source_limits={"main": {"page_pause_seconds": 0.01}},
        worker={"concurrency": 2, "slice_seconds": 0.3, "poll_seconds": 0.05,
                "heartbeat_seconds": 0.3, "reconcile_seconds": 0.3, "lease_seconds": 5.0})
    store = SqlJobStore(store_url)
    store.migrate()
    try:
        yield settings, store, source_url
    finally:
        store.close()


def _run_export(settings: Settings, store: SqlJobStore, source_url: str, tmp_path: Path,
                *, snapshot: bool) -> tuple[ExportRecord, Writer, int, int]:
    """Export both tables with two workers while the writer runs; returns the export
    and the writer's transaction numbers when the export was created and when it ended."""
    writer = Writer(source_url, SEED)
    writer.start()
    workers = []
    try:
        assert wait_until(lambda: writer.n >= 20 or writer.error is not None, 30)
        options: dict[str, Any] = {"part_rows": 200, **({"snapshot": True} if snapshot else {})}
        export, _ = create_export(store, settings, ExportRequest(
            source="main", tables=TABLES, format="jsonl", options=options))
        at_create = writer.n
        workers = [start_worker(settings.home, tmp_path / "workers.log") for _ in range(2)]
        assert wait_until(lambda: _state(store, export.id).terminal, 240, every=0.5)
        at_end = writer.n
    finally:
        writer.done.set()
        writer.join(30)
        for w in workers:
            stop(w)
    assert writer.error is None, writer.error
    final = store.export_get(None, export.id)
    assert final is not None
    assert final.state is ExportState.COMPLETED, (final.error_detail,
                                                 (tmp_path / "workers.log").read_text()[-3000:])
    return final, writer, at_create, at_end


def _state(store: SqlJobStore, export_id: str) -> ExportState:
    export = store.export_get(None, export_id)
    assert export is not None
    return export.state


def consistent_point(out: dict[str, list[tuple[int, int]]], log: Log) -> int | None:
    """The transaction after which both tables were exactly as exported, or None."""
    n = max(v for rows in out.values() for _, v in rows)
    state = state_after(log, n)
    return n if all(dict(out[t]) == state[t] and len(out[t]) == len(state[t])
                    for t in TABLES) else None


def test_a_snapshot_export_reads_both_tables_at_one_point_in_time(setup, tmp_path: Path):
    settings, store, source_url = setup
    export, writer, at_create, at_end = _run_export(settings, store, source_url, tmp_path,
                                                    snapshot=True)
    assert at_end - at_create >= 20, "the writer must change the tables while the export runs"
    out = exported(settings, export)
    point = consistent_point(out, writer.log)
    assert point is not None, "the export mixes points in time"
    # the snapshot was taken after the export was created, before it ended
    assert at_create <= point < at_end
    for rows in out.values():  # in key order, each key once
        keys = [k for k, _ in rows]
        assert keys == sorted(set(keys))
    manifest = json.loads((export_root(settings, export) / "manifest.json").read_text())
    assert manifest["snapshot"]["id"] == export.snapshot_id
    assert manifest["snapshot"]["taken_at"].startswith("20")
    assert export.snapshot_owner is not None


def test_without_snapshot_untouched_rows_appear_exactly_once(setup, tmp_path: Path):
    """The weaker model (docs/jobs.md): every row that exists and does not change during
    the export appears exactly once; changed rows may appear as of any moment of the run."""
    settings, store, source_url = setup
    export, writer, at_create, at_end = _run_export(settings, store, source_url, tmp_path,
                                                    snapshot=False)
    assert at_end - at_create >= 20
    out = exported(settings, export)
    touched = {t: {key for _, table, _, key in writer.log if table == t} for t in TABLES}
    for table in TABLES:
        keys = [k for k, _ in out[table]]
        assert keys == sorted(set(keys))  # never twice
        untouched = set(range(1, ROWS + 1)) - touched[table]
        assert untouched <= set(keys)
    assert export.snapshot_id is None
    # with the writer this busy, one point in time is out of reach without a snapshot
    # (this is what fails the test above when the snapshot is not used)
    assert consistent_point(out, writer.log) is None


def _coordinator_pid(export: ExportRecord) -> int:
    assert export.snapshot_owner is not None
    return int(export.snapshot_owner.split(":")[-2])  # host:pid:suffix (worker/loop.py)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_losing_the_coordinator_fails_the_export_with_the_documented_message(
    setup, tmp_path: Path, signum: int
):
    settings, store, _ = setup
    export, _ = create_export(store, settings, ExportRequest(
        source="main", tables=TABLES, format="jsonl",
        options={"part_rows": 100, "snapshot": True}))
    log = tmp_path / "workers.log"
    workers = [start_worker(settings.home, log) for _ in range(2)]
    try:
        def coordinated() -> bool:
            found = store.export_get(None, export.id)
            return found is not None and found.snapshot_owner is not None and any(
                t.rows > 0 for t in store.task_list(export.id))

        assert wait_until(coordinated, 60), log.read_text()[-3000:]
        recorded = store.export_get(None, export.id)
        assert recorded is not None
        pid = _coordinator_pid(recorded)
        (coordinator,) = [w for w in workers if w.pid == pid]
        stop(coordinator, signum)
        assert wait_until(lambda: _state(store, export.id).terminal, 60), log.read_text()[-3000:]
    finally:
        for w in workers:
            stop(w, signal.SIGTERM)
    failed = store.export_get(None, export.id)
    assert failed is not None and failed.state is ExportState.FAILED, failed
    assert failed.error is not None and failed.error_detail is not None
    assert "consistent snapshot was lost" in failed.error
    assert f"snapshot {recorded.snapshot_id} is gone" in failed.error_detail
    assert recorded.snapshot_owner in failed.error_detail
    assert "never continues on another snapshot" in failed.error_detail
    if signum == signal.SIGTERM:
        assert "was stopped" in failed.error_detail
    # a retry starts over on a new snapshot and completes (once the killed worker's lease
    # has expired and its task is back: the reconciler's rescue, run here)
    def stopped() -> bool:
        store.task_rescue_expired()
        return not any(t.state.value == "running" for t in store.task_list(export.id))

    assert wait_until(stopped, 30)
    retry_export(store, failed.project, failed.id, settings)
    workers = [start_worker(settings.home, log, "--exit-when-idle") for _ in range(2)]
    try:
        assert wait_until(lambda: all(w.poll() is not None for w in workers), 240, every=0.5)
    finally:
        for w in workers:
            stop(w)
    again = store.export_get(None, export.id)
    assert again is not None and again.state is ExportState.COMPLETED, again.error_detail
    assert again.snapshot_id is not None and again.snapshot_id != recorded.snapshot_id
    out = exported(settings, again)
    assert [len(out[t]) for t in TABLES] == [ROWS, ROWS]
