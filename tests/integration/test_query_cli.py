"""``egress export --query SQL --key COLUMN [--name NAME]``: the one-shot CLI exports a
read-only query, refuses bad combinations in one line, and a SIGKILLed run resumes (with
the printed kind of command) to the bytes of an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli import assert_one_line_error, assert_same_export, wait_for_state

import egress
from egress.cli import main
from egress.cli.export import ExportArgs
from egress.cli.params import parse_size
from jobsharness import make_events_db

CLI = [sys.executable, "-m", "egress.cli"]
QUERY = "SELECT id, kind, amount, created_at FROM events WHERE id % 3 <> 0"


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_events_db(tmp_path_factory.mktemp("query-cli") / "db.sqlite",
                          {"events": 60_000, "users": 10})


def test_query_export_from_the_cli(src: str, tmp_path: Path) -> None:
    out, ref = tmp_path / "out", tmp_path / "ref"
    result = CliRunner().invoke(main, [
        "export", "--source", src, "--query", QUERY, "--key", "id", "--name", "thirds",
        "--format", "jsonl", "--compression", "zstd", "--out", str(out), "--part-rows", "4000",
        "--quiet"])
    assert result.exit_code == 0, result.output
    egress.export(src, to=ref, query=QUERY, key=["id"], name="thirds", format="jsonl",
                  compression="zstd", part_rows=4000)
    assert (out / "thirds.jsonl.zst").exists()
    assert_same_export(out, ref)


@pytest.mark.parametrize(("args", "message"), [
    (["--query", "SELECT id FROM events", "--key", "id", "--table", "events"], "not both"),
    (["--table", "events", "--key", "id"], "--key and --name go with --query"),
    (["--query", "SELECT id FROM events"], "--query needs --key COLUMN: a result column"),
    (["--query", "DELETE FROM events", "--key", "id"], "DELETE statements are not allowed"),
    (["--query", "SELECT id, kind FROM events", "--key", "id,nope"], "'nope' are not columns"),
])
def test_bad_query_arguments(src: str, tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["export", "--source", src, "--format", "csv",
                                       "--out", str(tmp_path), *args])
    assert_one_line_error(result, 2, message)


def test_resume_command_repeats_the_query() -> None:
    args = ExportArgs(source="sqlite:///x.db", out="o", format="csv", query=QUERY,
                      key=("id", "kind"), name="q")
    assert args.resume_argv(["egress"]) == [
        "egress", "export", "--source", "sqlite:///x.db", "--query", QUERY, "--key", "id",
        "--key", "kind", "--name", "q", "--format", "csv", "--out", "o", "--resume"]


def test_killed_query_export_resumes_byte_identically(src: str, tmp_path: Path) -> None:
    out, ref = tmp_path / "out", tmp_path / "ref"
    argv = [*CLI, "export", "--source", src, "--query", QUERY, "--key", "id", "--format",
            "csv", "--compression", "gzip", "--out", str(out), "--part-rows", "500",
            "--max-file-size", "200KB", "--quiet"]
    for _ in range(3):  # kill -9 mid-run, three times, each after some progress
        proc = subprocess.Popen(argv + (["--resume"] if (out / ".egress").exists() else []),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        before = _rows(out)
        wait_for_state(out, proc, lambda s, before=before: _committed(s) > before + 2000)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    egress.export(src, to=ref, query=QUERY, key=["id"], format="csv", compression="gzip",
                  part_rows=500, max_file_size=int(parse_size("200KB")))
    assert_same_export(out, ref)


def _committed(state: dict) -> int:
    return sum(t["checkpoint"]["rows"] for t in state.get("tasks", {}).values())


def _rows(out: Path) -> int:
    try:
        return _committed(json.loads((out / ".egress" / "state.json").read_text()))
    except (OSError, ValueError):
        return 0
