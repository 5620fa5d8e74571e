"""Helpers for the job-system acceptance tests: homes, worker processes, reference runs."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import egress
from egress.config import Settings, load_settings
from egress.domain.jobs import ExportRecord
from egress.manager import export_root
from egress.store.base import JobStore, LeaseEvent


def make_events_db(path: Path, tables: dict[str, int], seed: int = 1) -> str:
    """A SQLite source with one ``events``-like table per entry (name → rows)."""
    conn = sqlite3.connect(path)
    for name, rows in tables.items():
        conn.execute(
            f'CREATE TABLE "{name}" (id INTEGER PRIMARY KEY, user_id INTEGER, kind TEXT, '
            "amount DECIMAL(12,2), payload TEXT, flag BOOLEAN, created_at DATETIME)"
        )
        conn.execute(
            f"""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
            INSERT INTO "{name}"
            SELECT i, (i * 7919 + {seed}) % 1000,
                   CASE i % 4 WHEN 0 THEN 'click' WHEN 1 THEN 'view' WHEN 2 THEN 'buy'
                        ELSE 'a "quoted", kind' END,
                   CASE WHEN i % 10 = 0 THEN NULL ELSE ((i * 37) % 100000) / 100.0 END,
                   'payload ' || i || char(10) || 'é, "x"',
                   i % 2,
                   datetime(1700000000 + i, 'unixepoch')
            FROM n
            """
        )
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def write_home(
    home: Path, *, store_url: str, sources: dict[str, str], worker: dict[str, Any],
    source_limits: dict[str, dict[str, Any]] | None = None,
) -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    lines = [f'[store]\nurl = "{store_url}"\n']
    for name, url in sources.items():
        lines.append(f'[sources.{name}]\nurl = "{url}"')
        lines += [f"{k} = {v!r}" for k, v in (source_limits or {}).get(name, {}).items()]
        lines.append("")
    lines.append("[worker]")
    # Workers at the default priority: the suite's groups share the machine, and a
    # worker at nice 10 would get a tenth of a contended core (the priority has its own
    # tests in test_jobs_cli.py and test_api_cli.py).
    worker = {"nice": 0, **worker}
    lines += [f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v!r}" for k, v in worker.items()]
    (home / "egress.toml").write_text("\n".join(lines) + "\n")
    return load_settings(home, env={})


#: Every worker started, so that none outlives its test (conftest kills what is left).
STARTED: list[subprocess.Popen[bytes]] = []


def start_worker(home: Path, log: Path, *extra: str,
                 env_extra: dict[str, str] | None = None,
                 script: Path | None = None) -> subprocess.Popen[bytes]:
    """An ``egress worker`` process (or ``script worker …``: the CLI with a test hook)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}
    env["EGRESS_HOME"] = str(home)
    # no probe server unless asked (--metrics-port): tests run several workers at once
    env["EGRESS_WORKER_METRICS_PORT"] = "0"
    env.update(env_extra or {})
    with open(log, "ab") as stderr:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, *([str(script)] if script else ["-m", "egress.cli"]),
             "worker", "--log-level", "INFO", *extra],
            env=env, stdout=subprocess.DEVNULL, stderr=stderr,
        )
    STARTED.append(proc)
    return proc


def drain_with_workers(home: Path, n: int, log: Path, timeout: float) -> None:
    """Start ``n`` ``egress worker --exit-when-idle`` processes and wait until all have
    exited (each with 0), at most ``timeout`` seconds."""
    procs = [start_worker(home, log, "--exit-when-idle") for _ in range(n)]
    try:
        assert wait_until(lambda: all(p.poll() is not None for p in procs), timeout, every=1)
    finally:
        for p in procs:
            stop(p)
    assert [p.returncode for p in procs] == [0] * n, log.read_text()[-3000:]


def run_ready_workers(home: Path, n: int, log: Path, until: Any, timeout: float,
                      start_work: Any = None) -> None:
    """Start ``n`` ``egress worker`` processes, wait until every one has logged that it
    started (all claim from then on), call ``start_work``, wait until ``until()`` holds,
    then stop them with SIGTERM (each must exit 0). Work created only once all are ready
    cannot be drained by the first process to start before the others are up."""
    procs = [start_worker(home, log) for _ in range(n)]
    try:
        assert wait_until(lambda: log.read_text().count("worker started") >= n, 120,
                          every=0.1), log.read_text()[-3000:]
        if start_work is not None:
            start_work()
        assert wait_until(until, timeout, every=0.2), log.read_text()[-3000:]
        for p in procs:
            stop(p, signal.SIGTERM)
    finally:
        for p in procs:
            stop(p)
    assert [p.returncode for p in procs] == [0] * n, log.read_text()[-3000:]


def kill_leftover_workers() -> int:
    """SIGKILL the workers a test started and did not stop; returns how many."""
    left = [p for p in STARTED if p.poll() is None]
    for proc in left:
        proc.kill()
        proc.wait(30)
    STARTED.clear()
    return len(left)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=30)


def wait_until(predicate: Any, timeout: float, every: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def output_files(root: Path) -> dict[str, str]:
    """name → SHA-256 of every file of an export (not the manifest, marker or state)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        skip = rel.startswith(".egress") or rel in ("manifest.json", "_SUCCESS")
        if p.is_file() and not skip:
            out[rel] = sha256(p)
    return out


def reference_outputs(
    source_url: str, table: str, fmt: str, compression: str, part_rows: int, out: Path
) -> dict[str, str]:
    """The files an uninterrupted in-process run writes for the same plan."""
    egress.export(source_url, [table], to=out, format=fmt, compression=compression,
                  part_rows=part_rows, fsync=False)
    return output_files(out)


def export_outputs(settings: Settings, export: ExportRecord) -> dict[str, str]:
    return output_files(export_root(settings, export))


def check_leases(events: Sequence[LeaseEvent]) -> list[str]:
    """Problems in the lease log: a claim while another lease was live, or an accepted
    commit/finish by a token that was not the task's current lease."""
    problems = []
    current: dict[str, str | None] = {}
    for e in events:
        holder = current.get(e.task_id)
        if e.kind == "claim":
            if holder is not None:
                problems.append(f"{e.task_id}: claimed by {e.lease_token} while {holder} held it")
            current[e.task_id] = e.lease_token
        elif e.kind in ("commit", "heartbeat"):
            if holder != e.lease_token:
                problems.append(f"{e.task_id}: {e.kind} by {e.lease_token}, lease is {holder}")
        elif e.kind in ("requeue", "release", "finish", "fail"):
            if holder != e.lease_token:
                problems.append(f"{e.task_id}: {e.kind} by {e.lease_token}, lease is {holder}")
            current[e.task_id] = None
        elif e.kind in ("rescue", "cancel"):
            current[e.task_id] = None
    return problems


def most_live_leases(events: Sequence[LeaseEvent], task_ids: Iterable[str]) -> int:
    """The most leases of ``task_ids`` live at one moment, from the lease log on the
    store's clock (at equal times an end counts before a claim: the store commits the
    end before a claim can see the slot free)."""
    wanted = set(task_ids)
    ends = ("requeue", "release", "finish", "fail", "rescue", "cancel")
    changes = sorted((e.at, 1 if e.kind == "claim" else 0, 1 if e.kind == "claim" else -1)
                     for e in events if e.task_id in wanted and (e.kind == "claim"
                                                                  or e.kind in ends))
    live = most = 0
    for _, _, delta in changes:
        live += delta
        most = max(most, live)
    return most


def all_terminal(store: JobStore, ids: Iterable[str]) -> bool:
    return all((e := store.export_get(None, i)) is not None and e.state.terminal for i in ids)


def run_with_kills(store: JobStore, export_id: str, home: Path, log: Path, *, workers: int,
                   kills: int, rng: random.Random, seconds: float) -> int:
    """Run ``export_id`` with ``workers`` worker processes, SIGKILLing a random one (and
    starting another in its place) every 0.6-1.4 s (seeded by ``rng``) until ``kills``
    kills or the export ends, then let them finish within ``seconds`` of the start.
    Returns the kills made; every worker is stopped on the way out."""
    procs = [start_worker(home, log) for _ in range(workers)]
    made = 0
    deadline = time.monotonic() + seconds
    try:
        while made < kills and not all_terminal(store, [export_id]):
            time.sleep(rng.uniform(0.6, 1.4))
            victim = rng.randrange(len(procs))
            stop(procs[victim])
            procs[victim] = start_worker(home, log)
            made += 1
        while not all_terminal(store, [export_id]):
            assert time.monotonic() < deadline, (
                f"export not done after {made} kills: {log.read_text()[-3000:]}")
            time.sleep(0.3)
    finally:
        for p in procs:
            stop(p)
    return made
