"""The postgres CSV dialect: PostgreSQL writes the CSV, egress cuts it into parts.

The output must be the bytes the server's own ``COPY (SELECT … ORDER BY key) TO STDOUT
(FORMAT csv, HEADER)`` writes, load back through ``COPY FROM`` into the same rows, and
resume byte-identical through a crash at every commit (as tests/unit/test_slice.py does
for egress's own formats). Combinations it cannot serve are refused with a clear error.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import egress
from egress.cli import main as cli_main
from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.domain.predicate import Predicate
from egress.engine.plan import plan_task
from egress.engine.slice import Task, run_slice
from egress.exceptions import ConfigError, SourceUnavailableError, TableNotFoundError
from egress.sinks.local import LocalSink
from egress.sources.postgres import PostgresSource

pytestmark = pytest.mark.postgres

CREATE = """
CREATE TABLE kinds (
  id bigint PRIMARY KEY, n numeric(12,3), f double precision, t text, b bytea, bo boolean,
  ts timestamptz, d date, j jsonb, ia integer[], u uuid)
"""
INSERT = r"""
INSERT INTO kinds
SELECT i, i * 1.5, i / 7.0, CASE i % 5 WHEN 0 THEN NULL WHEN 1 THEN '' WHEN 2
  THEN E'comma, "quote"\r\nCRLF é ✓' WHEN 3 THEN E'line\nbreak' ELSE 'plain ' || i END,
  CASE WHEN i % 3 = 0 THEN NULL ELSE decode(lpad(to_hex(i), 4, '0'), 'hex') END,
  i % 2 = 0, timestamptz '2024-02-29 12:34:56.789+02' + i * interval '1 hour',
  date '2024-01-01' + i, jsonb_build_object('i', i, 's', 'a,"b"'),
  ARRAY[i, NULL, -i], md5(i::text)::uuid
FROM generate_series(1, 40) AS i
"""
ROWS = 40


@pytest.fixture
def pg(pg_url: str) -> str:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(CREATE)
        conn.execute(INSERT)
        # a composite key of int and text, whose text holds the delimiter and quotes
        conn.execute("CREATE TABLE pairs (a int NOT NULL, k text NOT NULL, v text, "
                     "PRIMARY KEY (a, k))")
        conn.execute("""INSERT INTO pairs SELECT i % 4, 'k,"' || i || E'"\n', 'v' || i
                        FROM generate_series(1, 30) AS i""")
    return pg_url


def server_csv(url: str, table: str, order: str, delimiter: str = ",") -> bytes:
    """What the server itself writes for the whole table, with egress's session settings."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in ("SET TimeZone = 'UTC'", "SET DateStyle = 'ISO, YMD'",
                          "SET extra_float_digits = 1", "SET bytea_output = 'hex'"):
            conn.execute(statement)
        options = psycopg.sql.SQL("FORMAT csv, HEADER, DELIMITER {}").format(delimiter)
        query = psycopg.sql.SQL("COPY (SELECT * FROM {} ORDER BY {}) TO STDOUT ({})").format(
            psycopg.sql.Identifier(table), psycopg.sql.SQL(order), options)
        with conn.cursor().copy(query) as copy:
            return b"".join(bytes(chunk) for chunk in copy)


def export(url: str, out: Path, table: str = "kinds", **kw: Any) -> egress.ExportResult:
    options = {"csv_dialect": "postgres", **kw.pop("options", {})}
    return egress.export(url, [table], to=out, format="csv", options=options, **kw)


@pytest.mark.parametrize(("compression", "part_rows", "delimiter"),
                         [("none", 1, ","), ("none", 3, ","), ("gzip", 7, "|"),
                          ("zstd", 9, ",")])
def test_output_is_the_servers_own_csv(
    pg: str, tmp_path: Path, compression: str, part_rows: int, delimiter: str
) -> None:
    result = export(pg, tmp_path / "out", compression=compression, part_rows=part_rows,
                    options={"delimiter": delimiter})
    (name,) = result.manifest["tables"][0]["files"]
    data = (tmp_path / "out" / name).read_bytes()
    if compression == "gzip":
        data = gzip.decompress(data)
    elif compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        data = reader.read()
    assert data == server_csv(pg, "kinds", "id", delimiter)
    table = result.manifest["tables"][0]
    assert table["rows"] == ROWS
    assert table["key_range"] == {"first": [1], "last": [ROWS]}


def test_round_trip_through_copy_from(pg: str, tmp_path: Path) -> None:
    result = export(pg, tmp_path / "out", part_rows=4)
    path = tmp_path / "out" / result.manifest["tables"][0]["files"][0]
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("CREATE TABLE back (LIKE kinds)")
        with conn.cursor().copy("COPY back FROM STDIN (FORMAT csv, HEADER)") as copy:
            copy.write(path.read_bytes())
        differ = conn.execute(
            "SELECT count(*) FROM ((TABLE kinds EXCEPT ALL TABLE back) UNION ALL "
            "(TABLE back EXCEPT ALL TABLE kinds)) AS d").fetchone()
        assert differ == (0,)
        assert conn.execute("SELECT count(*) FROM back").fetchone() == (ROWS,)
        # NULL and the empty string stay apart, as do the booleans and bytea
        assert conn.execute("SELECT count(*) FROM back WHERE t IS NULL").fetchone() == (8,)
        assert conn.execute("SELECT count(*) FROM back WHERE t = ''").fetchone() == (8,)


def test_composite_text_key_pages_across_parts(pg: str, tmp_path: Path) -> None:
    result = export(pg, tmp_path / "out", table="pairs", part_rows=4)
    data = (tmp_path / "out" / result.manifest["tables"][0]["files"][0]).read_bytes()
    assert data == server_csv(pg, "pairs", "a, k")
    assert result.manifest["tables"][0]["rows"] == 30


def plan(url: str, **kw: Any) -> TaskSpec:
    source = PostgresSource(url)
    try:
        return plan_task(source, source.describe("kinds"), format="csv",
                         options={"csv_dialect": "postgres"}, **kw)
    finally:
        source.close()


def test_column_subset_must_keep_the_key(pg: str) -> None:
    assert plan(pg, columns=("t", "id")).columns == ("t", "id")
    with pytest.raises(ConfigError, match="columns must include the key of 'kinds': add id"):
        plan(pg, columns=("t", "n"))


def test_filters_are_refused(pg: str) -> None:
    predicate = Predicate.from_json([{"column": "id", "op": ">", "value": 3}])
    with pytest.raises(ConfigError, match="filters on rows need the default egress dialect"):
        plan(pg, predicate=predicate)


# --- resume through a crash at every commit -------------------------------------------

class Crash(Exception):
    """Stands for the process dying where it is raised."""


class Store:
    """Keeps the last committed checkpoint as JSON, as a job store does."""

    def __init__(self) -> None:
        self.saved = json.dumps(Checkpoint().to_json())
        self.commits = 0

    def save(self, cp: Checkpoint) -> None:
        self.saved = json.dumps(cp.to_json())
        self.commits += 1

    def load(self) -> Checkpoint:
        return Checkpoint.from_json(json.loads(self.saved))


@contextlib.contextmanager
def task_for(url: str, out: Path, spec: TaskSpec,
             commit: Callable[[Checkpoint], None]) -> Iterator[Task]:
    source = PostgresSource(url)
    try:
        yield Task(spec=spec, table=source.describe(spec.table), source=source,
                   sink=LocalSink(out, fsync=False), commit=commit)
    finally:
        source.close()


def outputs(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and ".egress" not in p.relative_to(out).parts}


def run_to_end(url: str, out: Path, spec: TaskSpec, store: Store,
               slice_parts: bool = False) -> Checkpoint:
    cp = store.load()
    with task_for(url, out, spec, store.save) as task:
        while not cp.done:
            # a deadline already passed: a slice of one part, a new COPY each time
            cp = run_slice(task, cp, task.clock() - 1 if slice_parts else task.clock() + 60)
    return cp


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(("compression", "kw"), [
    ("gzip", {"part_rows": 4, "max_file_size": 1500}),
    ("none", {"part_rows": 6}),
])
def test_crash_at_every_commit_resumes_byte_identical(
    pg: str, tmp_path: Path, when: str, compression: str, kw: dict[str, Any]
) -> None:
    source = PostgresSource(pg)
    try:
        spec = plan_task(source, source.describe("kinds"), format="csv",
                         compression=compression, options={"csv_dialect": "postgres"}, **kw)
    finally:
        source.close()
    want_store = Store()
    run_to_end(pg, tmp_path / "baseline", spec, want_store)
    want = outputs(tmp_path / "baseline")
    if "max_file_size" in kw:
        assert len(want) > 1
    # slices of one part each write the same bytes as one long slice
    assert outputs_of(pg, tmp_path / "sliced", spec) == want

    for crash_at in range(1, want_store.commits + 1):
        out = tmp_path / f"crash-{crash_at}"
        store = Store()
        calls = 0

        def commit(cp: Checkpoint, crash_at: int = crash_at, store: Store = store) -> None:
            nonlocal calls
            calls += 1
            if calls == crash_at and when == "before":
                raise Crash
            store.save(cp)
            if calls == crash_at:
                raise Crash

        with pytest.raises(Crash), task_for(pg, out, spec, commit) as task:
            cp = store.load()
            while not cp.done:
                cp = run_slice(task, cp, task.clock() + 60)
        assert run_to_end(pg, out, spec, store).rows == ROWS
        assert outputs(out) == want, f"crash at commit {crash_at} ({when})"


def outputs_of(url: str, out: Path, spec: TaskSpec) -> dict[str, bytes]:
    run_to_end(url, out, spec, Store(), slice_parts=True)
    return outputs(out)


# --- refusals -------------------------------------------------------------------------

def test_refused_with_another_format(pg: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="csv_dialect applies to format csv only, not jsonl"):
        egress.export(pg, ["kinds"], to=tmp_path / "out", format="jsonl",
                      options={"csv_dialect": "postgres"})
    result = CliRunner().invoke(cli_main, [
        "export", "--source", pg, "--table", "kinds", "--format", "jsonl",
        "--out", str(tmp_path / "cli"), "--csv-dialect", "postgres"])
    assert result.exit_code != 0
    assert "--csv-dialect applies to --format csv only, not jsonl" in result.output


def test_refused_with_a_sqlite_source(tmp_path: Path) -> None:
    db = tmp_path / "src.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigError, match=r"needs tables of a PostgreSQL source.*sqlite"):
        egress.export(f"sqlite:///{db}", ["items"], to=tmp_path / "out", format="csv",
                      options={"csv_dialect": "postgres"})


def test_refused_with_a_query(pg: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs tables of a PostgreSQL source.*a query"):
        egress.export(pg, to=tmp_path / "out", format="csv", query="SELECT id FROM kinds",
                      key=["id"], options={"csv_dialect": "postgres"})


def test_unknown_dialect_is_refused(pg: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown CSV dialect 'excel'; known: egress, postgres"):
        egress.export(pg, ["kinds"], to=tmp_path / "out", format="csv",
                      options={"csv_dialect": "excel"})


def test_jobs_create_and_a_worker_write_the_servers_csv(pg: str, tmp_path: Path) -> None:
    env = {"EGRESS_HOME": str(tmp_path / "home"), "EGRESS_WORKER_NICE": "0"}
    runner = CliRunner()
    refused = runner.invoke(cli_main, ["jobs", "create", "--source", pg, "--table", "kinds",
                                       "--format", "jsonl", "--csv-dialect", "postgres"],
                            env=env)
    assert refused.exit_code != 0
    assert "csv_dialect applies to format csv only, not jsonl" in refused.output
    made = runner.invoke(cli_main, ["jobs", "create", "--source", pg, "--table", "kinds",
                                    "--csv-dialect", "postgres", "--part-rows", "6"], env=env)
    assert made.exit_code == 0, made.output
    ran = runner.invoke(cli_main, ["worker", "--exit-when-idle"], env=env)
    assert ran.exit_code == 0, ran.output
    (path,) = (tmp_path / "home").rglob("kinds.csv")
    assert path.read_bytes() == server_csv(pg, "kinds", "id")


def test_a_lost_connection_is_transient_and_the_next_stream_reconnects(pg: str) -> None:
    with psycopg.connect(pg, autocommit=True) as conn:
        # more than the socket buffers hold: the server is still sending when it is killed
        conn.execute("CREATE TABLE big AS SELECT i AS id, repeat('x', 200) AS pad "
                     "FROM generate_series(1, 200000) AS i")
        conn.execute("ALTER TABLE big ADD PRIMARY KEY (id)")
    source = PostgresSource(pg)
    try:
        info = source.describe("big")
        stream = source.copy_csv(info, None, info.column_names)
        assert stream.take(2).rows == 2
        with psycopg.connect(pg, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE pid <> pg_backend_pid() AND query LIKE 'COPY%'")
        with pytest.raises(SourceUnavailableError):
            stream.take(200_000)
        stream.close()
        again = source.copy_csv(info, (200_000 - 3,), info.column_names)
        got = again.take(10)
        assert (got.rows, got.ended) == (3, True)
        # a table dropped under the export is a clear, permanent error
        with psycopg.connect(pg, autocommit=True) as other:
            other.execute("DROP TABLE big")
        with pytest.raises(TableNotFoundError):
            source.copy_csv(info, None, info.column_names)
    finally:
        source.close()
