"""``egress jobs create|show|ls|rm`` speak as ``egress export`` and the API do: sizes
with units, the formats in --help, RFC 3339 times in --json; an ended export deleted with
its files."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from egress.cli import main
from egress.cli.demo_data import build_demo_db


def test_jobs_create_takes_sizes_lists_formats_and_shows_rfc3339(tmp_path: Path) -> None:
    db = build_demo_db(tmp_path / "demo.db", rows=2000)
    # (worker.nice 0: the worker runs in this process here, whose priority would stay)
    env = {"EGRESS_HOME": str(tmp_path / "home"), "EGRESS_WORKER_NICE": "0"}
    runner = CliRunner()
    helped = runner.invoke(main, ["jobs", "create", "--help"], env=env)
    assert "csv, json, jsonl, parquet, sql" in " ".join(helped.stdout.split())
    assert "gzip, none, zstd" in " ".join(helped.stdout.split())

    made = runner.invoke(main, ["jobs", "create", "--source", f"sqlite:///{db}", "--table",
                                "events", "--format", "jsonl", "--max-file-size", "64KiB",
                                "--part-rows", "200"],
                         env=env)
    assert made.exit_code == 0, made.output
    export_id = made.stdout.strip()
    ran = runner.invoke(main, ["worker", "--exit-when-idle"], env=env)
    assert ran.exit_code == 0, ran.output
    # the worker says what it does, one JSON line each (no terminal here), every line of
    # a task's work with its ids, and nothing of its libraries' chatter
    lines = [json.loads(line) for line in ran.stderr.splitlines()]
    by = {}
    for line in lines:
        by.setdefault(line["message"], []).append(line)
    [claimed] = by["task claimed"]
    assert claimed["export_id"] == export_id and claimed["attempts"] == 0
    task_id, worker_id = claimed["task_id"], claimed["worker_id"]
    assert task_id.startswith("tsk_") and worker_id
    work = by["slice ended"] + by["export completed"]
    assert all((w["export_id"], w["task_id"], w["worker_id"]) == (export_id, task_id, worker_id)
               for w in work)
    assert by["export completed"][0]["rows"] == 2000 == by["slice ended"][-1]["total_rows"]
    started = next(i for i, line in enumerate(lines) if line["message"] == "worker started")
    assert all(line["worker_id"] == worker_id for line in lines[started:])
    assert not any("alembic" in line["logger"] for line in lines)
    assert dt.datetime.fromisoformat(lines[0]["time"]).tzinfo == dt.UTC
    # on request, the readable form
    text = runner.invoke(main, ["worker", "--exit-when-idle", "--log-format", "text"], env=env)
    assert "worker started" in text.stderr and not text.stderr.lstrip().startswith("{")

    shown = json.loads(runner.invoke(main, ["jobs", "show", export_id, "--json"],
                                     env=env).stdout)
    assert shown["status"] == "completed"
    names = [f["name"] for f in shown["files"]]
    assert len(names) > 1 and names[0] == "events-00001.jsonl"  # 64 KiB files
    assert all(f["bytes"] < 64 * 1024 + 40_000 for f in shown["files"][:-1])
    for name in ("created_at", "started_at", "finished_at"):
        assert shown[name].endswith("Z"), shown[name]
        assert dt.datetime.fromisoformat(shown[name]).tzinfo == dt.UTC
    listed = json.loads(runner.invoke(main, ["jobs", "ls", "--json"], env=env).stdout)
    assert listed[0]["created_at"] == shown["created_at"]

    bad = runner.invoke(main, ["jobs", "create", "--source", f"sqlite:///{db}", "--table",
                               "events", "--max-file-size", "lots"], env=env)
    assert bad.exit_code == 2 and "lots" in bad.stderr


def test_jobs_rm_deletes_an_ended_export_and_waits_for_a_stopping_task(tmp_path: Path) -> None:
    from egress.config import load_settings
    from egress.store.sql import SqlJobStore

    db = build_demo_db(tmp_path / "demo.db", rows=500)
    home = tmp_path / "home"
    env = {"EGRESS_HOME": str(home), "EGRESS_WORKER_NICE": "0"}
    runner = CliRunner()

    def create() -> str:
        made = runner.invoke(main, ["jobs", "create", "--source", f"sqlite:///{db}",
                                    "--table", "users", "--format", "csv"], env=env)
        assert made.exit_code == 0, made.output
        return made.stdout.strip()

    done = create()
    assert runner.invoke(main, ["worker", "--exit-when-idle"], env=env).exit_code == 0
    files = home / "exports" / "default" / done
    assert (files / "_SUCCESS").exists()

    # a queued export is cancelled first; nothing of it is touched
    queued = create()
    refused = runner.invoke(main, ["jobs", "rm", queued], env=env)
    assert refused.exit_code != 0 and f"cancel export {queued}" in refused.stderr
    # a task still stopping after the cancel (its worker finishing the part in hand) could
    # write after the files went: the export is left whole, and the answer says to wait
    store = SqlJobStore(load_settings(str(home)).store_url)
    try:
        [claimed] = store.task_claim("w1", lease_seconds=60, project_cap=10)
        assert claimed.export_id == queued
        assert runner.invoke(main, ["jobs", "cancel", queued], env=env).exit_code == 0
        stopping = runner.invoke(main, ["jobs", "rm", queued], env=env)
        assert stopping.exit_code != 0 and "still has a task stopping" in stopping.stderr
        assert runner.invoke(main, ["jobs", "show", queued], env=env).exit_code == 0
        assert claimed.lease_token is not None
        assert store.task_requeue(claimed.id, claimed.lease_token)  # the worker lets go
    finally:
        store.close()
    for export_id in (queued, done):
        removed = runner.invoke(main, ["jobs", "rm", export_id], env=env)
        assert removed.exit_code == 0, removed.output
        assert removed.stdout == f"{export_id}  deleted\n"
        gone = runner.invoke(main, ["jobs", "show", export_id], env=env)
        assert gone.exit_code != 0 and f"no export {export_id!r}" in gone.stderr
    assert not files.exists() and (home / "exports" / "default").exists()
    again = runner.invoke(main, ["jobs", "rm", done], env=env)
    assert again.exit_code != 0 and f"no export {done!r}" in again.stderr


def test_jobs_wait_follows_an_export_until_it_ends_and_says_how_in_its_exit_code(
    tmp_path: Path,
) -> None:
    from jobsharness import make_events_db, start_worker, stop, write_home

    source = make_events_db(tmp_path / "src.db", {"events": 6000, "small": 10})
    home = tmp_path / "home"
    # paced: the export lasts ~1.5 s, so the wait sees it move
    write_home(home, store_url=f"sqlite:///{home / 'egress.db'}", sources={"main": source},
               worker={"poll_seconds": 0.05},
               source_limits={"main": {"max_rows_per_second": 4000}})
    env = {"EGRESS_HOME": str(home)}
    runner = CliRunner()

    def create(*tables: str) -> str:
        argv = ["jobs", "create", "--source", "main", "--part-rows", "500"]
        made = runner.invoke(main, [*argv, *(a for t in tables for a in ("--table", t))],
                             env=env)
        assert made.exit_code == 0, made.output
        return made.stdout.strip()

    # nothing runs it yet: the wait gives up after --timeout, and the export goes on
    first = create("events", "small")
    waited = runner.invoke(main, ["jobs", "wait", first, "--timeout", "0.3"], env=env)
    assert waited.exit_code == 124, waited.output
    assert f"export {first} is still queued after 0.3 s" in waited.stderr
    assert json.loads(runner.invoke(main, ["jobs", "show", first, "--json"],
                                    env=env).stdout)["status"] == "queued"

    worker = start_worker(home, tmp_path / "worker.log")
    try:
        waited = runner.invoke(main, ["jobs", "wait", first, "--interval", "0.1",
                                      "--progress", "lines"], env=env)
    finally:
        stop(worker)
    assert waited.exit_code == 0, (waited.output, (tmp_path / "worker.log").read_text())
    assert waited.stdout.startswith(f"{first}  completed  6,010 rows  2 files")
    lines = waited.stderr.splitlines()
    assert "events: started (~6,000 rows)" in lines
    assert any(line.startswith("events: done, 6,000 rows") for line in lines), lines
    assert any(line.startswith("small: done, 10 rows") for line in lines), lines
    # an export that has ended is answered at once, with its files in --json
    ended = runner.invoke(main, ["jobs", "wait", first, "--json", "--progress", "none"],
                          env=env)
    assert ended.exit_code == 0 and ended.stderr == ""
    assert [f["name"] for f in json.loads(ended.stdout)["files"]] == [
        "events.csv", "small.csv"]

    cancelled = create("small")
    assert runner.invoke(main, ["jobs", "cancel", cancelled], env=env).exit_code == 0
    waited = runner.invoke(main, ["jobs", "wait", cancelled], env=env)
    assert waited.exit_code == 1
    assert f"egress: error: export {cancelled} cancelled" in waited.stderr
    missing = runner.invoke(main, ["jobs", "wait", "exp_nothing"], env=env)
    assert missing.exit_code == 1 and "no export 'exp_nothing'" in missing.stderr


def _nice_of_threads(pid: int) -> list[int]:
    values = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            values.append(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
    return values


def test_a_worker_runs_at_a_lower_cpu_priority_unless_told_not_to(tmp_path: Path) -> None:
    import signal
    import time

    from jobsharness import start_worker, stop

    for nice in (None, 0):
        home = tmp_path / f"home-{nice}"
        home.mkdir(mode=0o700)
        (home / "egress.toml").write_text("" if nice is None else f"[worker]\nnice = {nice}\n")
        log = tmp_path / f"worker-{nice}.log"
        proc = start_worker(home, log)
        try:
            deadline = time.monotonic() + 30
            while "worker started" not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            expected = 10 if nice is None else 0
            assert set(_nice_of_threads(proc.pid)) == {expected}
            assert {"message": "worker priority", "nice": expected}.items() <= next(
                line for line in map(json.loads, log.read_text().splitlines())
                if line["message"] == "worker priority").items()
        finally:
            stop(proc, signal.SIGTERM)


def test_a_worker_starts_without_the_libraries_its_exports_do_not_need(tmp_path: Path) -> None:
    """A worker imports the Trino client (httpx), botocore and Alembic only when a remote
    export, an S3 destination or a migration needs them: they were ~0.2 s of every
    worker's start-up, paid at each deploy, scale-out and restart after a kill."""
    script = textwrap.dedent("""
        import sys
        from egress.cli import main
        try:
            main(["worker", "--exit-when-idle"])
        except SystemExit as end:
            assert end.code == 0, end.code
        print(sorted(m for m in ("alembic", "httpx", "botocore", "boto3") if m in sys.modules))
    """)
    env = {**os.environ, "EGRESS_HOME": str(tmp_path / "home"), "EGRESS_WORKER_NICE": "0",
           "EGRESS_WORKER_METRICS_PORT": "0"}
    seen = []
    for _ in range(2):  # the first worker migrates the new store; the second finds it current
        ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=env, timeout=120)
        assert ran.returncode == 0, ran.stderr
        seen.append(ran.stdout.strip())
    assert seen == ["['alembic']", "[]"], seen
