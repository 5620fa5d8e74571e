"""Throughput of N worker processes draining many tiny exports on one PostgreSQL store.

    .venv/bin/python bench/workers_throughput.py [--exports 500] [--workers 1,2,4,8]

For each N: a fresh store database, EXPORTS one-table exports of a 20-row SQLite table,
then N ``egress worker --exit-when-idle`` processes; prints exports/s from the moment the
workers start until the last one exits, and checks that every task was claimed once.
Not part of the test suite (it prints figures).
"""

from __future__ import annotations

import argparse
import collections
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from jobsharness import start_worker, write_home
from pgserver import running_server


def run(workers: int, exports: int, server, tmp: Path) -> tuple[float, int]:
    db = tmp / "tiny.db"
    if not db.exists():
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE tiny (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO tiny VALUES (?, ?)", [(i, f"v{i}") for i in range(20)])
        conn.commit()
        conn.close()
    url = server.create_database(f"throughput_{workers}_{int(time.time())}")
    home = tmp / f"home-{workers}"
    settings = write_home(home, store_url=url, sources={"tiny": f"sqlite:///{db}"},
                          worker={"concurrency": 1, "lease_seconds": 120.0,
                                  "poll_seconds": 0.05, "project_cap": 100})
    store = SqlJobStore(url)
    store.migrate()
    for _ in range(exports):
        create_export(store, settings, ExportRequest(source="tiny", tables=("tiny",)))
    start = time.monotonic()
    procs = [start_worker(home, tmp / "workers.log", "--exit-when-idle") for _ in range(workers)]
    for p in procs:
        p.wait()
    elapsed = time.monotonic() - start
    claims = collections.Counter(e.task_id for e in store.lease_events() if e.kind == "claim")
    doubles = sum(1 for n in claims.values() if n > 1)
    store.close()
    return exports / elapsed, doubles


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exports", type=int, default=500)
    parser.add_argument("--workers", default="1,2,4,8")
    args = parser.parse_args()
    with running_server() as server, tempfile.TemporaryDirectory() as tmp:
        print("| workers | exports | exports/s | tasks claimed more than once |")
        print("|---:|---:|---:|---:|")
        for n in (int(w) for w in args.workers.split(",")):
            rate, doubles = run(n, args.exports, server, Path(tmp))
            print(f"| {n} | {args.exports} | {rate:.1f} | {doubles} |", flush=True)


if __name__ == "__main__":
    main()
