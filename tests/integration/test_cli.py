"""The ``egress export`` and ``egress demo`` commands against a real SQLite database.

Bad inputs give one line on stderr and the documented exit code; Ctrl-C, SIGTERM and a
second Ctrl-C stop a real subprocess, and the printed resume command completes an output
identical to an uninterrupted run's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import egress
from egress.cli import main
from egress.cli.demo_data import build_demo_db
from egress.cli.export import ExportArgs, resume_text
from egress.cli.params import parse_size

EVENTS = 200_000
CLI = [sys.executable, "-m", "egress.cli"]


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_db(tmp_path_factory.mktemp("cli-db") / "demo.db", rows=EVENTS)


@pytest.fixture(scope="module")
def src(demo_db: Path) -> str:
    return f"sqlite:///{demo_db}"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def assert_one_line_error(result: Result, code: int, message: str) -> None:
    # an unexpected exception would be in result.exception (and a traceback for a user)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("egress: error: "), lines[0]
    assert message in lines[0]


def file_digests(out: Path) -> dict[str, str]:
    """SHA-256 of every output file (the manifest holds times, so it is compared apart)."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and ".egress" not in p.relative_to(out).parts
        and p.name not in ("manifest.json", "_SUCCESS")
    }


def assert_same_export(out: Path, reference: Path) -> None:
    assert (out / "_SUCCESS").exists()
    assert not (out / ".egress").exists()
    assert file_digests(out) == file_digests(reference)
    files = json.loads((out / "manifest.json").read_text())["files"]
    assert files == json.loads((reference / "manifest.json").read_text())["files"]


# --- bad input: one line, the right exit code ------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["--table", "evnts"], 3, "table 'evnts' not found; did you mean events?",
                     id="unknown-table"),
        pytest.param(["--table", "events", "--format", "xml"], 2,
                     "unknown format 'xml'; known: csv, json, jsonl, parquet, sql", id="format"),
        pytest.param(["--table", "events", "--compression", "lz4"], 2,
                     "unknown compression 'lz4'; known: gzip, none, zstd", id="compression"),
        pytest.param(["--table", "events", "--all"], 2, "not both", id="table-and-all"),
        pytest.param([], 2, "name the tables to export with --table", id="no-table"),
        pytest.param(["--table", "events", "--delimiter", ";", "--format", "json"], 2,
                     "--delimiter applies to --format csv only", id="delimiter-not-csv"),
    ],
)
def test_bad_arguments(src: str, tmp_path: Path, args: list[str], code: int, message: str) -> None:
    base = ["export", "--source", src, "--out", str(tmp_path / "out")]
    if "--format" not in args:
        base += ["--format", "csv"]
    assert_one_line_error(invoke(*base, *args), code, message)


@pytest.mark.parametrize(
    ("source", "code", "message"),
    [
        pytest.param("sqlite:////nonexistent/shop.db", 3, "no such file", id="missing-file"),
        pytest.param("oracle://u@h/db", 2, "unknown source kind 'oracle'; known:",
                     id="bad-scheme"),
        pytest.param("shop.db", 2, "--source must be a URL such as sqlite:///shop.db",
                     id="not-a-url"),
        pytest.param("sqlite://shop.db", 3, "not a SQLite URL", id="bad-sqlite-url"),
    ],
)
def test_unreadable_sources(tmp_path: Path, source: str, code: int, message: str) -> None:
    result = invoke("export", "--source", source, "--table", "t", "--format", "csv",
                    "--out", str(tmp_path / "out"))
    assert_one_line_error(result, code, message)


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a SQLite database" * 100)
    result = invoke("export", "--source", f"sqlite:///{junk}", "--table", "t", "--format", "csv",
                    "--out", str(tmp_path / "out"))
    assert_one_line_error(result, 3, "cannot open SQLite database")


def test_refused_connection(tmp_path: Path) -> None:
    from pgserver import free_port  # nothing listens on a port just freed

    url = f"postgresql://reader:hunter2@127.0.0.1:{free_port()}/shop"
    result = invoke("export", "--source", url, "--table", "t", "--format", "csv",
                    "--out", str(tmp_path / "out"))
    assert_one_line_error(result, 3, "127.0.0.1")
    assert "hunter2" not in result.output  # secrets never appear in errors


def test_output_directory_not_writable(src: str, tmp_path: Path) -> None:
    # root may write anywhere; a path below a regular file is unwritable for everyone
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = invoke("export", "--source", src, "--table", "users", "--format", "csv",
                    "--out", str(blocker / "out"))
    assert_one_line_error(result, 4, "is not writable")


def test_bad_size_is_a_usage_error(src: str, tmp_path: Path) -> None:
    result = invoke("export", "--source", src, "--table", "users", "--format", "csv",
                    "--out", str(tmp_path / "out"), "--max-file-size", "12XB")
    assert result.exit_code == 2
    assert "'12XB' is not a size" in result.stderr
    assert not isinstance(result.exception, Exception)


def test_sizes() -> None:
    assert parse_size("64MB") == 64_000_000
    assert parse_size("1GiB") == 1024**3
    assert parse_size("1.5M") == 1536 * 1024
    assert parse_size("4096") == 4096
    assert parse_size(" 8 kib ").text == "8 kib"
    for bad in ("", "MB", "-1MB", "0", "1 parsec"):
        with pytest.raises(ValueError):
            parse_size(bad)


# --- --resume ---------------------------------------------------------------------------


def partial_export(src: str, out: Path, commits: int = 3, **kwargs: Any) -> None:
    """An export stopped after a few committed parts, as Ctrl-C leaves it."""
    calls = iter(range(10**9))
    result = egress.export(
        src, ["events"], to=out, format="csv", part_rows=1000,
        should_stop=lambda: next(calls) > commits, **kwargs,
    )
    assert result.interrupted


def test_resume_with_nothing_to_resume(src: str, tmp_path: Path) -> None:
    result = invoke("export", "--source", src, "--table", "events", "--format", "csv",
                    "--out", str(tmp_path / "empty"), "--resume")
    assert_one_line_error(result, 2, "nothing to resume")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--table", "orders", "--format", "csv"], "tables: checkpoint has ['events']"),
        (["--table", "events", "--format", "jsonl"], "format: checkpoint has 'csv'"),
        (["--table", "events", "--format", "csv", "--compression", "gzip"],
         "compression: checkpoint has 'none'"),
    ],
)
def test_resume_mismatch(src: str, tmp_path: Path, change: list[str], message: str) -> None:
    out = tmp_path / "out"
    partial_export(src, out)
    result = invoke("export", "--source", src, "--out", str(out), *change, "--resume")
    assert_one_line_error(result, 2, "--resume must continue the same export")
    assert message in result.stderr


def test_unfinished_and_finished_directories(src: str, tmp_path: Path) -> None:
    out, ref = tmp_path / "out", tmp_path / "ref"
    partial_export(src, out)
    args = ["export", "--source", src, "--table", "events", "--format", "csv", "--out", str(out)]
    assert_one_line_error(invoke(*args), 2, "holds an unfinished export; continue it with --resume")

    resumed = invoke(*args, "--part-rows", "1000", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert f"{EVENTS:,} rows" in resumed.stdout
    assert f"Manifest: {out.resolve() / 'manifest.json'}" in resumed.stdout
    egress.export(src, ["events"], to=ref, format="csv", part_rows=1000)
    assert_same_export(out, ref)

    assert_one_line_error(invoke(*args), 2, "already holds a completed export")
    again = invoke(*args, "--resume")  # resuming a finished export is a no-op
    assert again.exit_code == 0
    assert not (out / ".egress").exists()


def test_export_quiet_and_delimiter(src: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("export", "--source", src, "--table", "products", "--format", "csv",
                    "--out", str(out), "--delimiter", "\\t", "--quiet")
    assert result.exit_code == 0
    assert result.stdout == "" and result.stderr == ""
    header = (out / "products.csv").read_text().splitlines()[0]
    assert header == "sku\tname\tdescription\tprice\tweight_kg\tin_stock\ttags\tadded_on"


def test_parquet_defaults_and_row_group_size(src: str, tmp_path: Path) -> None:
    """Parquet without --compression is zstd inside, one file of row groups; a row group
    size makes smaller row groups; --row-group-size with a text format is refused."""
    import pyarrow.parquet as pq

    files = {}
    for name, extra in (("default", ()), ("small", ("--row-group-size", "64KiB"))):
        out = tmp_path / name
        result = invoke("export", "--source", src, "--table", "events", "--format",
                        "parquet", "--out", str(out), "--quiet", *extra)
        assert result.exit_code == 0, result.stderr
        [files[name]] = sorted((out / "events").glob("*.parquet"))
    default, small = (pq.ParquetFile(files[n]).metadata for n in ("default", "small"))
    assert default.num_rows == small.num_rows == EVENTS
    assert default.row_group(0).column(0).compression == "ZSTD"
    assert default.num_row_groups > 1  # ~55k rows of 16 MiB each
    assert small.num_row_groups > default.num_row_groups
    refused = invoke("export", "--source", src, "--table", "events", "--format", "csv",
                     "--out", str(tmp_path / "csv"), "--row-group-size", "1MB")
    assert refused.exit_code != 0
    assert "--row-group-size applies to --format parquet only" in refused.stderr


def test_resume_command_hides_the_password() -> None:
    args = ExportArgs(
        source="postgresql://alice:s3cr%40t@db.example:5432/shop", out="out dir",
        format="csv", tables=("orders", "line items"), compression="gzip",
        max_file_size=parse_size("64MB"),
    )
    text = resume_text(args, ["egress"])
    assert "s3cr" not in text
    assert "PGPASSWORD" in text
    argv = shlex.split(text.splitlines()[0])
    assert argv == [
        "egress", "export", "--source", "postgresql://alice@db.example:5432/shop",
        "--table", "orders", "--table", "line items", "--format", "csv", "--out", "out dir",
        "--compression", "gzip", "--max-file-size", "64MB", "--resume",
    ]


@pytest.mark.postgres
def test_resume_without_the_password(pg_url: str, tmp_path: Path) -> None:
    """The printed command leaves the password out; --resume accepts the URL without it."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, name text)")
        conn.execute("INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, 5000) i")
    # the test server trusts every connection, so any password works
    with_password = pg_url.replace("postgresql://postgres@", "postgresql://postgres:pw@")
    out, ref = tmp_path / "out", tmp_path / "ref"
    calls = iter(range(10**9))
    partial = egress.export(with_password, ["items"], to=out, format="jsonl", part_rows=500,
                            should_stop=lambda: next(calls) > 3)
    assert partial.interrupted
    result = invoke("export", "--source", pg_url, "--table", "items", "--format", "jsonl",
                    "--out", str(out), "--part-rows", "500", "--resume")
    assert result.exit_code == 0, result.output
    egress.export(pg_url, ["items"], to=ref, format="jsonl", part_rows=500)
    assert_same_export(out, ref)


# --- signals, in a real subprocess ----------------------------------------------------------


def export_argv(src: str, out: Path, *extra: str) -> list[str]:
    return [*CLI, "export", "--source", src, "--table", "events", "--table", "users",
            "--format", "csv", "--out", str(out), "--compression", "gzip", *extra]


def wait_for_state(out: Path, proc: subprocess.Popen[str], ready: Callable[[dict], bool]) -> None:
    state = out / ".egress" / "state.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the export ended before it could be interrupted"
        try:
            if ready(json.loads(state.read_text())):
                return
        except (OSError, ValueError):
            pass  # not written yet
        time.sleep(0.005)
    raise AssertionError("the export made no progress")


def rows_committed(state: dict) -> int:
    return sum(t["checkpoint"]["rows"] for t in state.get("tasks", {}).values())


def resume_argv(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith("Resume with:"))
    return shlex.split(lines[at + 1])


@pytest.fixture(scope="module")
def reference(src: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ref = tmp_path_factory.mktemp("cli-ref") / "ref"
    egress.export(src, ["events", "users"], to=ref, format="csv", compression="gzip",
                  part_rows=1000)
    return ref


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stop_prints_the_resume_command(
    src: str, reference: Path, tmp_path: Path, signum: int, code: int
) -> None:
    out = tmp_path / "out"
    argv = export_argv(src, out, "--part-rows", "1000", "--slice-seconds", "0.2")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_state(out, proc, lambda s: rows_committed(s) > 0)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert "egress: interrupted; committed parts are kept. Resume with:" in stderr
    state = json.loads((out / ".egress" / "state.json").read_text())
    assert 0 < rows_committed(state) < EVENTS  # it stopped part-way, with work kept

    command = resume_argv(stderr)
    assert command == [*argv, "--resume"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Exported 2 tables" in done.stdout
    assert_same_export(out, reference)


def test_second_ctrl_c_quits_at_once(src: str, tmp_path: Path) -> None:
    out, ref = tmp_path / "out", tmp_path / "ref"
    # One uncompressed part holds the whole table: after the first Ctrl-C the process would
    # still be reading it for a while. --quiet makes the stop notice appear at once.
    argv = [*CLI, "export", "--source", src, "--table", "events", "--format", "jsonl",
            "--out", str(out), "--part-rows", str(EVENTS), "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_state(out, proc, lambda s: "events" in s.get("tasks", {}))
    time.sleep(0.15)  # inside the part: a stop before it would end the run gracefully
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    notice = proc.stderr.readline()
    assert "Stopping after the part in hand" in notice
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "egress: stopped at once; committed parts are kept. Resume with:" in stderr
    assert not (out / "events.jsonl").exists()

    done = subprocess.run(resume_argv(stderr), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    egress.export(src, ["events"], to=ref, format="jsonl", part_rows=EVENTS)
    assert_same_export(out, ref)


# --- the demo -----------------------------------------------------------------------------


def test_demo_builds_exports_and_reruns(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = invoke("demo", "--rows", "5000", env={"EGRESS_HOME": str(home)})
    assert first.exit_code == 0, first.output
    out = home / "demo" / "export-csv-gzip"
    manifest = json.loads((out / "manifest.json").read_text())
    rows = {t["table"]: t["rows"] for t in manifest["tables"]}
    assert rows == {"edge_cases": 12, "events": 5000, "orders": 500, "products": 50, "users": 100}
    assert f"Manifest: {out / 'manifest.json'}" in first.stdout
    assert "built in" in first.stderr

    digests = file_digests(out)
    again = invoke("demo", "--rows", "5000", env={"EGRESS_HOME": str(home)})
    assert again.exit_code == 0, again.output
    assert "(reused)" in again.stderr
    assert file_digests(out) == digests  # deterministic data, fresh output directory


def test_demo_parquet_holds_every_type(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    result = invoke("demo", "--rows", "2000", "--out", str(tmp_path), "--format", "parquet",
                    "--compression", "zstd", "--quiet")
    assert result.exit_code == 0, result.output
    edge = pq.read_table(tmp_path / "export-parquet-zstd" / "edge_cases").to_pylist()
    by_label = {row["label"]: row for row in edge}
    assert by_label["int64 max"]["big"] == 2**63 - 1
    assert by_label["int64 min"]["big"] == -(2**63)
    assert by_label["+infinity"]["ratio"] == float("inf")
    assert by_label["-infinity"]["ratio"] == float("-inf")
    assert all(v is None for k, v in by_label["all null"].items() if k != "label")
    users = pq.read_table(tmp_path / "export-parquet-zstd" / "users")
    types = {f.name: str(f.type) for f in users.schema}
    assert types["balance"] == "decimal128(12, 2)"
    assert types["birthday"] == "date32[day]"
    assert types["last_seen_at"] == "timestamp[us, tz=UTC]"
    assert types["avatar"] == "binary"
    assert types["is_admin"] == "bool"


def test_demo_ends_with_commands_that_run_as_printed(tmp_path: Path) -> None:
    """The demo's closing lines are commands a new user pastes: each one must work."""
    env = {**os.environ, "EGRESS_HOME": str(tmp_path / "home")}
    done = subprocess.run([*CLI, "demo", "--rows", "3000"], capture_output=True, text=True,
                          timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.split("Next (every command runs as pasted", 1)[1].splitlines()[1:]
    commands = [line.strip() for line in printed if line.strip() and
                not line.strip().startswith("#")]
    assert len(commands) == 6, done.stdout
    for command in commands[:-1]:  # the last one serves the API until stopped
        ran = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120,
                             env=env, cwd=tmp_path)
        assert ran.returncode == 0, (command, ran.stderr)
    assert (tmp_path / "out" / "orders.jsonl").stat().st_size > 0
    assert commands[-1].split("#")[0].split()[-1] == "serve"


def test_demo_quiet_still_says_where_the_files_are(tmp_path: Path) -> None:
    result = invoke("demo", "--rows", "2000", "--out", str(tmp_path), "--quiet")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"Exported to {tmp_path.resolve() / 'export-csv-gzip'}"


# --- progress on a terminal and on a pipe ---------------------------------------------------


def test_progress_on_a_pipe_is_plain_lines(src: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "export", "--source", src, "--table", "events", "--format", "csv",
         "--out", str(tmp_path / "out"), "--part-rows", "20000", "--progress-interval", "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"events: started (~{EVENTS:,} rows)"
    middle = [line for line in lines if "rows/s" in line and "ETA" in line]
    assert len(middle) >= 3, done.stderr  # a line per committed part with interval 0
    assert re.fullmatch(r"events: [\d,]+/~200,000 rows \(\d+%\), [\d.]+ [kM]?B, "
                        r"[\d,]+ rows/s, ETA \d+:\d\d:\d\d", middle[0]), middle[0]
    assert re.fullmatch(r"events: done, 200,000 rows, .* in \d+:\d\d:\d\d, [\d,]+ rows/s",
                        lines[-1]), lines[-1]
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", done.stderr)  # no control characters


def test_progress_on_a_terminal_is_a_bar(src: str, tmp_path: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*CLI, "export", "--source", src, "--table", "events", "--format", "csv",
             "--out", str(tmp_path / "out"), "--part-rows", "20000"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower,
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(leader)
    text = seen.decode()
    assert "\x1b[" in text  # the bar is redrawn with escape sequences
    assert "200,000 rows" in text and "events: started" not in text


def test_progress_none_and_lines_are_chosen_explicitly(src: str, tmp_path: Path) -> None:
    quiet = invoke("export", "--source", src, "--table", "users", "--format", "csv",
                   "--out", str(tmp_path / "a"), "--progress", "none")
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == "" and "Manifest:" in quiet.stdout
    wrong = invoke("export", "--source", src, "--table", "users", "--format", "csv",
                   "--out", str(tmp_path / "b"), "--progress", "dots")
    assert wrong.exit_code == 2
    assert "'auto', 'bar', 'lines', 'none'" in wrong.stderr
