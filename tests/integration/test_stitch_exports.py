"""A stitched split (``split_files: false``) run by several ``egress worker`` processes
(real SQLite and PostgreSQL): each table is one file, byte-identical to the file of an
unsplit single-task export of the same table (docs/jobs.md, Splitting a big table)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from egress.domain.jobs import ExportState
from egress.exceptions import ConfigError
from egress.export_view import export_view
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from jobsharness import drain_with_workers, write_home
from splitharness import add_pairs, duckdb_source, pg_source, sqlite_source

WORKER = {"concurrency": 1, "heartbeat_seconds": 0.3, "reconcile_seconds": 0.3,
          "poll_seconds": 0.1, "backoff_seconds": 0.2, "max_attempts": 20,
          "slice_seconds": 1.0}
#: 30,000 rows (splitharness) in 18 chunks: the last range ends with a short chunk
PART_ROWS = 1700


def stitched_and_whole(tmp_path: Path, source: str, table: str, fmt: str,
                       compression: str | None, store_url: str | None = None,
                       workers: int = 3) -> tuple[Any, Any, Any]:
    settings = write_home(tmp_path / "home",
                          store_url=store_url or f"sqlite:///{tmp_path / 'home' / 'egress.db'}",
                          sources={"main": source}, worker=WORKER)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        split, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt, compression=compression,
            options={"split": 4, "split_files": False, "part_rows": PART_ROWS}))
        whole, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt, compression=compression,
            options={"part_rows": PART_ROWS}))
        # one task until a worker claims it and plans the ranges (engine/split.py)
        assert [t.key_range for t in store.task_list(split.id)] == [None]
        drain_with_workers(settings.home, workers, tmp_path / "workers.log", timeout=80)
        tasks = store.task_list(split.id)
        assert [t.key_range["index"] for t in tasks] == [0, 1, 2, 3]
        assert all(t.spec and t.spec["stitch_name"] for t in tasks)  # planned with the table
        # each range's estimate is its exact row count, counted when planned (the ETA)
        assert [t.rows_estimate for t in tasks] == [t.rows for t in tasks]
        split, whole = store.export_get(None, split.id), store.export_get(None, whole.id)
        assert split.state is ExportState.COMPLETED, split.error_detail
        assert whole.state is ExportState.COMPLETED, whole.error_detail
        # the view (jobs show, GET /v1/exports/{id}, downloads) offers the one file
        (shown,) = export_view(store, split, settings).files
        (listed,) = split.manifest["files"]
        assert (shown.name, shown.rows, shown.bytes, shown.crc32c, shown.sha256) == (
            listed["name"], listed["rows"], listed["bytes"], listed["crc32c"],
            listed["sha256"])
        return settings, split, whole
    finally:
        store.close()


def check_identical(settings: Any, split: Any, whole: Any) -> None:
    (got,), (want,) = split.manifest["files"], whole.manifest["files"]
    assert got["name"] == want["name"]
    for key in ("rows", "bytes", "crc32c", "sha256", "first_key", "last_key"):
        assert got[key] == want[key], key
    root = export_root(settings, split)
    assert (root / got["name"]).read_bytes() == (
        export_root(settings, whole) / want["name"]).read_bytes()
    (entry,) = split.manifest["tables"]
    assert [r["range"] for r in entry["split"]] == [1, 2, 3, 4]
    assert sum(r["rows"] for r in entry["split"]) == entry["rows"] == got["rows"]
    assert entry["bytes"] == got["bytes"] == split.manifest["total_bytes"]
    # no piece left (a finalizer beside the completing one may remake an empty folder)
    assert [p for p in (root / ".egress").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("fmt,compression", [("csv", "gzip"), ("json", None),
                                             ("jsonl", "zstd"), ("sql", None),
                                             ("parquet", None)])
def test_sqlite_stitched_split_is_byte_identical(tmp_path: Path, fmt: str,
                                                 compression: str | None) -> None:
    source = sqlite_source(tmp_path / "source.db")
    settings, split, whole = stitched_and_whole(tmp_path, source, "events", fmt, compression)
    check_identical(settings, split, whole)


@pytest.mark.postgres
@pytest.mark.parametrize("fmt,compression", [("csv", "gzip"), ("json", "zstd"),
                                             ("sql", None), ("parquet", None)])
def test_postgres_stitched_split_is_byte_identical(tmp_path: Path, pg_server: Any, fmt: str,
                                                   compression: str | None) -> None:
    suffix = random.Random(str(tmp_path)).randrange(10**9)
    source = pg_source(pg_server, f"stitch_src_{suffix}")
    store_url = pg_server.create_database(f"stitch_store_{suffix}")
    settings, split, whole = stitched_and_whole(tmp_path, source, "events", fmt, compression,
                                                store_url, workers=4)
    check_identical(settings, split, whole)


@pytest.mark.parametrize("table,fmt,compression", [("events", "csv", "gzip"),
                                                   ("words", "parquet", None),
                                                   ("stamps", "jsonl", "zstd")])
def test_duckdb_stitched_split_is_byte_identical(tmp_path: Path, table: str, fmt: str,
                                                 compression: str | None) -> None:
    source = duckdb_source(tmp_path / "source.duckdb")
    settings, split, whole = stitched_and_whole(tmp_path, source, table, fmt, compression)
    check_identical(settings, split, whole)


def test_a_create_checks_splits_from_the_catalog_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The request answers at once: it refuses what cannot be split from the catalog, and
    sampling the key (split files) or counting rows (stitched) is the first worker's job,
    however big the table."""
    from egress.sources.sqlite import SqliteSource

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the create request read the table's keys")

    monkeypatch.setattr(SqliteSource, "split_points", refuse)
    monkeypatch.setattr(SqliteSource, "key_at_rows", refuse)
    source = sqlite_source(tmp_path / "source.db", rows=3000)
    settings = write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 's.db'}",
                          sources={"main": source}, worker=WORKER)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()

        def create(**options: Any) -> Any:
            return create_export(store, settings, ExportRequest(
                source="main", tables=("events",), format="csv", options=options))[0]

        for options in ({"split": 4}, {"split": 4, "split_files": True},
                        {"split": 4, "split_files": False}, {"split": "auto"}, {}):
            [task] = store.task_list(create(**options).id)
            assert task.key_range is None and task.spec is None, options

        with pytest.raises(ConfigError, match="max_file_size needs split_files: true"):
            create(split=2, split_files=False, max_file_size=10_000)
        with pytest.raises(ConfigError, match="give split too"):
            create(split_files=False)
        with pytest.raises(ConfigError, match="must be true or false"):
            create(split=2, split_files="no")
        with pytest.raises(ConfigError, match="filters"):
            create(split=2, split_files=False, select={"events": {"filters": [
                {"column": "kind", "op": "=", "value": "x"}]}})
    finally:
        store.close()


@pytest.mark.parametrize("fmt,compression,min_part", [
    ("csv", "gzip", 1024),  # pieces above the minimum: copied by the server
    ("parquet", None, 1024),
    ("json", None, 300_000),  # pieces below it: read and uploaded together
])
def test_s3_stitched_split_is_byte_identical(tmp_path: Path, s3: Any, fmt: str,
                                             compression: str | None, min_part: int) -> None:
    from egress.config import load_settings

    # ids up to 200,000: SQLite's row estimate is then its count, and the single task's
    # part budget (S3: 10,000 parts) plans the same rows per part as the stitched ranges
    source = sqlite_source(tmp_path / "source.db", top=200_000)
    settings = write_home(tmp_path / "home",
                          store_url=f"sqlite:///{tmp_path / 'home' / 'egress.db'}",
                          sources={"main": source}, worker=WORKER)
    with open(settings.home / "egress.toml", "a") as f:
        f.write(f'\n[destinations.lake]\ntype = "s3"\nbucket = "{s3.name}"\n'
                f'prefix = "egress"\nmin_part_bytes = {min_part}\n'
                # moto lists every upload as started in 2010: no sweep of "old" ones
                "\n[export]\norphan_sweep_seconds = inf\n")
    settings = load_settings(settings.home, env={})
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        exports = [create_export(store, settings, ExportRequest(
            source="main", tables=("events",), format=fmt, compression=compression,
            destination="lake", options={"part_rows": PART_ROWS, **extra}))[0]
            for extra in ({"split": 4, "split_files": False}, {})]
        drain_with_workers(settings.home, 3, tmp_path / "workers.log", timeout=80)
        assert len(store.task_list(exports[0].id)) == 4
        done = [store.export_get(None, e.id) for e in exports]
        for e in done:
            assert e.state is ExportState.COMPLETED, e.error_detail
        (got,), (want,) = done[0].manifest["files"], done[1].manifest["files"]
        assert got["name"] == want["name"]
        for key in ("rows", "bytes", "crc32c", "sha256", "first_key", "last_key"):
            assert got[key] == want[key], key
        objects = [s3.objects(f"egress/default/{e.id}/") for e in done]
        assert set(objects[0]) == {got["name"], "manifest.json", "_SUCCESS"}  # no piece
        assert objects[0][got["name"]] == objects[1][want["name"]]
        assert s3.uploads("egress/") == []
    finally:
        store.close()


def test_default_split_is_stitched_where_it_applies(tmp_path: Path) -> None:
    """Without split_files: a one-column key is stitched; a composite key, filters or
    max_file_size write range files; split_files: true always writes range files."""
    from click.testing import CliRunner

    from egress.cli import main

    source = sqlite_source(tmp_path / "source.db", rows=3000)
    add_pairs(tmp_path / "source.db", 3000)
    settings = write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 's.db'}",
                          sources={"main": source}, worker=WORKER)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()

        def create(table: str, **options: Any) -> str:
            export, _ = create_export(store, settings, ExportRequest(
                source="main", tables=(table,), format="csv",
                options={"split": 3, "part_rows": 500, **options}))
            return export.id

        made = {"stitched": create("events"), "files": create("events", split_files=True),
                "max_file_size": create("events", max_file_size=10_000),
                "composite": create("pairs")}
        with pytest.raises(ConfigError, match="one-column key"):
            create("pairs", split_files=False)
        drain_with_workers(settings.home, 2, tmp_path / "workers.log", timeout=60)
        specs = {k: [t.spec for t in store.task_list(v)] for k, v in made.items()}
        stitched = specs.pop("stitched")
        assert len(stitched) == 3 and all(s["stitch_name"] == "events.csv" for s in stitched)
        assert [s["stitch_rows_before"] for s in stitched] == [0, 1000, 2000]
        for kind, planned in specs.items():  # range files: each range planned on its own
            assert len(planned) == 3 and not any(s.get("stitch_name") for s in planned), kind
            assert [s["key_range"]["index"] for s in planned] == [0, 1, 2], kind
        for export_id in made.values():
            done = store.export_get(None, export_id)
            assert done is not None and done.state is ExportState.COMPLETED, done
    finally:
        store.close()
    home = str(settings.home)
    made = CliRunner().invoke(main, ["jobs", "create", "--home", home, "--source", "main",
                                     "--table", "pairs", "--split", "2", "--no-split-files"])
    assert made.exit_code != 0 and "one-column key" in made.output, made.output
    made = CliRunner().invoke(main, ["jobs", "create", "--home", home, "--source", "main",
                                     "--table", "pairs", "--split", "2", "--split-files"])
    assert made.exit_code == 0, made.output


def test_s3_stitch_killed_midway_is_redone(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stitch that dies between parts leaves no object under the final name and no
    upload; the redo builds the bytes, and a redo after that only answers its SHA-256."""
    import hashlib

    from egress.sinks.s3 import S3Sink

    sink = S3Sink(s3.name, "st", min_part_bytes=1024, max_attempts=1, retry_seconds=0.0)
    datas = [b"a" * 3000, b"b" * 10, b"c" * 700, b"", b"d" * 5000]
    pieces = []
    for k, data in enumerate(datas):
        name = f".egress/ranges/t.csv.r0{k + 1}"
        sink.put_object(name, data)
        pieces.append((name, len(data)))
    want = b"".join(datas) + b"END"
    real = S3Sink._call

    def dying(self: S3Sink, op: str, key: str, **kwargs: Any) -> Any:
        if op == "upload_part_copy" and kwargs.get("PartNumber", 0) > 1:
            raise KeyboardInterrupt  # stands for a kill between parts
        return real(self, op, key, **kwargs)

    monkeypatch.setattr(S3Sink, "_call", dying)
    with pytest.raises(KeyboardInterrupt):
        sink.stitch_file("t.csv", pieces, b"END", len(want))
    assert "t.csv" not in s3.objects("st/") and s3.uploads("st/") == []
    monkeypatch.setattr(S3Sink, "_call", real)
    sha = sink.stitch_file("t.csv", pieces, b"END", len(want))
    assert s3.objects("st/") == {"t.csv": want}  # pieces removed
    assert sha == hashlib.sha256(want).hexdigest() == sink.stitch_file(
        "t.csv", pieces, b"END", len(want))


def test_big_tables_split_by_default_only_where_the_file_stays_the_same(
    tmp_path: Path,
) -> None:
    """No split option: a table above split_rows is split when a stitch writes the bytes
    one task writes (here a CSV of a one-column key); a Parquet dataset (numbered files)
    or a composite key stays one task, and split: false keeps any table whole."""
    from egress.config import load_settings

    source = sqlite_source(tmp_path / "source.db")
    add_pairs(tmp_path / "source.db", 30_000)
    settings = write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 's.db'}",
                          sources={"main": source}, worker=WORKER)
    with open(settings.home / "egress.toml", "a") as f:
        f.write("\n[export]\nsplit_rows = 8000\n")
    settings = load_settings(settings.home, env={})
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()

        def create(table: str, fmt: str = "csv", **options: Any) -> str:
            export, _ = create_export(store, settings, ExportRequest(
                source="main", tables=(table,), format=fmt, compression="gzip"
                if fmt == "csv" else None, options={"part_rows": PART_ROWS, **options}))
            return export.id

        made = {"default": create("events"), "whole": create("events", split=False),
                "parquet": create("events", "parquet"), "pairs": create("pairs")}
        drain_with_workers(settings.home, 3, tmp_path / "workers.log", timeout=80)
        tasks = {k: store.task_list(v) for k, v in made.items()}
        assert len(tasks["default"]) >= 2
        assert all(t.spec["stitch_name"] == "events.csv.gz" for t in tasks["default"])
        for kind in ("whole", "parquet", "pairs"):
            assert [t.key_range for t in tasks[kind]] == [None], kind
        done = {k: store.export_get(None, v) for k, v in made.items()}
        for e in done.values():
            assert e.state is ExportState.COMPLETED, e.error_detail
        check_same_file(settings, done["default"], done["whole"])
    finally:
        store.close()


def check_same_file(settings: Any, split: Any, whole: Any) -> None:
    (got,), (want,) = split.manifest["files"], whole.manifest["files"]
    assert (got["name"], got["sha256"]) == (want["name"], want["sha256"])
    assert (export_root(settings, split) / got["name"]).read_bytes() == (
        export_root(settings, whole) / want["name"]).read_bytes()
