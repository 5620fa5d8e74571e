"""A split export run by several ``egress worker`` processes (real SQLite and PostgreSQL):
the rows of its files, read in manifest order, are the rows of the unsplit export, row
by row, every key exactly once; ``egress jobs show`` and the view list the ranges."""

from __future__ import annotations

import random
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
from splitharness import pg_source, rows_of, sqlite_source

WORKER = {"concurrency": 1, "heartbeat_seconds": 0.3, "reconcile_seconds": 0.3,
          "poll_seconds": 0.1, "backoff_seconds": 0.2, "max_attempts": 20,
          "slice_seconds": 1.0}
ROWS = 30_000  # splitharness's default


def run_split_and_whole(tmp_path: Path, source: str, table: str, fmt: str,
                        store_url: str | None = None, **options: Any) -> tuple[Any, ...]:
    settings = write_home(tmp_path / "home",
                          store_url=store_url or f"sqlite:///{tmp_path / 'home' / 'egress.db'}",
                          sources={"main": source}, worker=WORKER)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        split, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt,
            options={"split": 4, "split_files": True, "part_rows": 1500, **options}))
        whole, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt, options={"part_rows": 1500}))
        # one task until a worker claims it and plans the ranges (engine/split.py)
        assert [t.key_range for t in store.task_list(split.id)] == [None]
        drain_with_workers(settings.home, 3, tmp_path / "workers.log", timeout=80)
        tasks = store.task_list(split.id)
        assert len(tasks) == 4 and [t.key_range["index"] for t in tasks] == [0, 1, 2, 3]
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
@pytest.mark.parametrize("table,fmt,snapshot", [("events", "jsonl", False),
                                                ("stamps", "csv", False),
                                                ("events", "csv", True)])
def test_postgres_split_export_equals_the_unsplit_rows(tmp_path: Path, pg_server: Any,
                                                       table: str, fmt: str,
                                                       snapshot: bool) -> None:
    suffix = random.Random(str(tmp_path)).randrange(10**9)
    source = pg_source(pg_server, f"split_src_{suffix}")
    store_url = pg_server.create_database(f"split_store_{suffix}")
    settings, split, whole, _ = run_split_and_whole(
        tmp_path, source, table, fmt, store_url, **({"snapshot": True} if snapshot else {}))
    check_same_rows(settings, split, whole, fmt)
    assert ("snapshot" in split.manifest) is snapshot  # every range read in one snapshot


@pytest.mark.postgres
def test_postgres_sampled_boundaries_and_filtered_ranges(tmp_path: Path, pg_server: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A table above EXACT_UNTIL is sampled (TABLESAMPLE SYSTEM, REPEATABLE: one plan);
    a range read with filters binds its bounds as parameters; every row once."""
    import dataclasses

    from egress.domain.predicate import Condition, Predicate
    from egress.engine.split import plan_ranges
    from egress.sources import pg_split
    from egress.sources.postgres import PostgresSource

    monkeypatch.setattr(pg_split, "EXACT_UNTIL", 1000)
    monkeypatch.setattr(pg_split, "SAMPLE_ROWS", 10_000)
    suffix = random.Random(str(tmp_path)).randrange(10**9)
    source = PostgresSource(pg_source(pg_server, f"split_sample_{suffix}"))
    try:
        info = source.describe("events")
        assert pg_split.split_query('"public"."events"', '"id"', info.row_estimate)[1]
        ranges = plan_ranges(source, info, 4, 10)
        assert ranges is not None and len(ranges) == 4
        assert plan_ranges(source, info, 4, 10) == ranges  # REPEATABLE: the same plan

        def read(predicate: Predicate | None) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            after = None
            while True:
                page = [r for b in source.read(info, after, 4000, predicate=predicate)
                        for r in b.to_pylist()]
                if not page:
                    return out
                out += page
                after = (page[-1]["id"],)

        whole = read(None)
        parts = [read(Predicate((), r)) for r in ranges]
        assert [r for p in parts for r in p] == whole
        sizes = [len(p) for p in parts]
        assert max(sizes) <= 2 * min(sizes), sizes  # a sample of pages, still balanced
        kind = Condition("kind", "=", "k3")
        filtered = [read(Predicate((kind,), r)) for r in ranges]  # the parameter path
        assert [r for p in filtered for r in p] == [r for r in whole if r["kind"] == "k3"]
        open_both = dataclasses.replace(ranges[1], lo=None, hi=None)
        assert read(Predicate((), open_both)) == whole
    finally:
        source.close()


def test_cli_jobs_create_split(tmp_path: Path) -> None:
    source = sqlite_source(tmp_path / "source.db", rows=3000)
    settings = write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 'home' / 's.db'}",
                          sources={"main": source}, worker=WORKER)
    home = str(settings.home)
    runner = CliRunner()
    assert runner.invoke(main, ["migrate", "--home", home]).exit_code == 0
    made = runner.invoke(main, ["jobs", "create", "--home", home, "--source", "main",
                                "--table", "events", "--split", "2", "--json"])
    assert made.exit_code == 0, made.output
    bad = runner.invoke(main, ["jobs", "create", "--home", home, "--source", "main",
                               "--table", "events", "--split", "1"])
    assert bad.exit_code != 0 and "integer from 2 to 64" in bad.output, bad.output
    query = runner.invoke(main, ["jobs", "create", "--home", home, "--source", "main",
                                 "--query", "SELECT id FROM events", "--key", "id",
                                 "--split", "auto"])
    assert query.exit_code != 0 and "not to a query" in query.output, query.output
