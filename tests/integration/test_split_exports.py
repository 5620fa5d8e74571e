"""A split export run by several ``egress worker`` processes (real SQLite and PostgreSQL):
the rows of its files, read in manifest order, are the rows of the unsplit export, row
by row, every key exactly once; ``egress jobs show`` and the view list the ranges."""

from __future__ import annotations

import csv
import io
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from egress.cli import main
from egress.domain.jobs import ExportState
from egress.export_view import export_view
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from jobsharness import drain_with_workers, write_home

WORKER = {"concurrency": 1, "heartbeat_seconds": 0.3, "reconcile_seconds": 0.3,
          "poll_seconds": 0.1, "backoff_seconds": 0.2, "max_attempts": 20,
          "slice_seconds": 1.0}
ROWS = 30_000


def skewed_ids(n: int, seed: int) -> list[int]:
    """Distinct ids: four fifths packed in [1, n], the rest spread up to 10^12."""
    rng = random.Random(seed)
    dense = list(range(1, n * 4 // 5 + 1))
    sparse: set[int] = set()
    while len(sparse) < n - len(dense):
        sparse.add(rng.randrange(n * 10, 10**12))
    return dense + sorted(sparse)


def sqlite_source(path: Path, seed: int = 3) -> str:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, amount REAL, "
                  "at DATETIME)")
    rows = [(i, f"k{i % 7}, \"q\"", (i % 1000) / 8, f"2024-01-01 00:00:{i % 60:02d}")
            for i in skewed_ids(ROWS, seed)]
    conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def pg_source(pg_server: Any, name: str) -> str:
    import psycopg

    url = pg_server.create_database(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, kind text, amount numeric, "
                     "at timestamptz NOT NULL)")
        with conn.cursor().copy("COPY events FROM STDIN") as copy:
            for i in skewed_ids(ROWS, 5):
                copy.write_row((i, f"k{i % 7}", i % 1000, "2024-01-01 00:00:00+00"))
        # a timestamp key, skewed: most rows in the first hour of a year
        conn.execute("CREATE TABLE stamps (at timestamptz PRIMARY KEY, n int)")
        conn.execute("INSERT INTO stamps SELECT timestamptz '2024-01-01 00:00:00+00' + "
                     "(CASE WHEN g % 5 = 0 THEN g * interval '17 minutes' "
                     "ELSE g * interval '1 millisecond' END), g FROM generate_series(1, 20000) g")
        conn.execute("ANALYZE")
    return url


def rows_of(root: Path, names: list[str], fmt: str) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for name in names:
        data = (root / name).read_bytes()
        if fmt == "csv":
            out += [tuple(r) for r in list(csv.reader(io.StringIO(data.decode())))[1:]]
        elif fmt == "jsonl":
            out += [tuple(json.loads(line).items()) for line in data.decode().splitlines()]
        else:
            import pyarrow.parquet as pq

            out += [tuple(r.items()) for r in pq.read_table(root / name).to_pylist()]
    return out


def run_split_and_whole(tmp_path: Path, source: str, table: str, fmt: str,
                        store_url: str | None = None) -> tuple[Any, ...]:
    settings = write_home(tmp_path / "home",
                          store_url=store_url or f"sqlite:///{tmp_path / 'home' / 'egress.db'}",
                          sources={"main": source}, worker=WORKER)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        split, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt,
            options={"split": 4, "part_rows": 1500}))
        whole, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt, options={"part_rows": 1500}))
        tasks = store.task_list(split.id)
        assert len(tasks) == 4 and [t.key_range["index"] for t in tasks] == [0, 1, 2, 3]
        drain_with_workers(settings.home, 3, tmp_path / "workers.log", timeout=80)
        split, whole = store.export_get(None, split.id), store.export_get(None, whole.id)
        assert split.state is ExportState.COMPLETED, split.error_detail
        assert whole.state is ExportState.COMPLETED, whole.error_detail
        view = export_view(store, split, settings)
        return settings, split, whole, view
    finally:
        store.close()


def check_same_rows(settings: Any, split: Any, whole: Any, fmt: str) -> list[str]:
    manifest = split.manifest
    names = [f["name"] for f in manifest["files"]]
    assert names == sorted(names) and len(names) >= 4  # each range its own files, in order
    (entry,) = manifest["tables"]
    assert [r["range"] for r in entry["split"]] == [1, 2, 3, 4]
    assert sum(r["rows"] for r in entry["split"]) == entry["rows"]
    got = rows_of(export_root(settings, split), names, fmt)
    want = rows_of(export_root(settings, whole), [f["name"] for f in whole.manifest["files"]],
                   fmt)
    assert got == want
    keys = [row[0] for row in got]  # the key is the first column of both tables
    assert len(set(keys)) == len(keys) == entry["rows"]
    counts = [r["rows"] for r in entry["split"]]
    assert max(counts) <= 2 * min(counts), counts  # skewed key, similar counts
    return names


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_sqlite_split_export_equals_the_unsplit_rows(tmp_path: Path, fmt: str) -> None:
    source = sqlite_source(tmp_path / "source.db")
    settings, split, whole, view = run_split_and_whole(tmp_path, source, "events", fmt)
    names = check_same_rows(settings, split, whole, fmt)
    assert names[0].startswith("events.r01-00001" if fmt == "csv" else "events/part-r01-")
    ranges = [t.key_range for t in view.tables]
    assert [r["range"] for r in ranges] == [1, 2, 3, 4] and ranges[0]["lo"] is None
    assert view.rows_estimate is not None and view.rows == ROWS
    result = CliRunner().invoke(main, ["jobs", "show", "--home", str(settings.home), split.id])
    assert result.exit_code == 0, result.output
    assert "range 1/4 of id: (-inf, " in result.output and ", +inf]" in result.output


@pytest.mark.postgres
@pytest.mark.parametrize("table,fmt", [("events", "jsonl"), ("stamps", "csv")])
def test_postgres_split_export_equals_the_unsplit_rows(tmp_path: Path, pg_server: Any,
                                                       table: str, fmt: str) -> None:
    suffix = random.Random(str(tmp_path)).randrange(10**9)
    source = pg_source(pg_server, f"split_src_{suffix}")
    store_url = pg_server.create_database(f"split_store_{suffix}")
    settings, split, whole, _ = run_split_and_whole(tmp_path, source, table, fmt, store_url)
    check_same_rows(settings, split, whole, fmt)
