"""CPU seconds per stage of a PostgreSQL → CSV export, egress's dialect against the
postgres dialect (the server writes the CSV), with ``psql \\copy`` in turns.

    flock /tmp/egress-bench.lock .venv/bin/python bench/pg_csv_budget.py --rows 1000000

Each export runs in a fresh process (bench/child.py's way: ``egress.export`` into a new
directory). Stages, for the postgres dialect: start-up (process CPU before the first part
is read: Python, imports, connections, the catalog, planning), reading (the calling
thread in ``Task.read_part``: libpq's reads, joining rows, parsing the last key),
committing (the committer thread in ``Task.commit_part``: ``pwrite``, ``fsync``, CRC32C,
the checkpoint file), SHA-256 (the sink's thread: timed here on the file's bytes), and
the server backend of the COPY (``/proc/PID/stat``). psql's CPU is the client's own; its
server's is not counted (like egress's ``CPU`` in docs/benchmarks.md's tables).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import data

ROOT = Path(__file__).resolve().parent.parent
WORK = Path("/tmp/egress-bench/budget")

CHILD = r"""
import hashlib, json, os, sys, time
started = time.perf_counter()
from egress.memory import use_system_allocator
use_system_allocator()
import egress
from egress.engine import slice as slice_mod
from egress.sources import postgres as pg_mod

url, out, dialect = sys.argv[1], sys.argv[2], sys.argv[3]
stages = {"reading": 0.0, "committing": 0.0, "server": 0.0}
first = []

def timed(name, fn):
    def wrapper(*args, **kw):
        if not first:
            first.append(time.process_time())
        t = time.thread_time()
        try:
            return fn(*args, **kw)
        finally:
            stages[name] += time.thread_time() - t
    return wrapper

slice_mod.Task.read_part = timed("reading", slice_mod.Task.read_part)
slice_mod.Task.commit_part = timed("committing", slice_mod.Task.commit_part)
close = pg_mod.PostgresSource.close

def close_and_count(self):
    copier = getattr(self, "_copier", None)
    if copier is not None and not copier.closed:
        with open(f"/proc/{copier.info.backend_pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        stages["server"] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    close(self)

pg_mod.PostgresSource.close = close_and_count
options = {"csv_dialect": "postgres"} if dialect == "postgres" else {}
egress.export(url, ["events"], to=out, format="csv", options=options)
wall = time.perf_counter() - started
cpu = time.process_time()
blob = open(os.path.join(out, "events.csv"), "rb").read()
t = time.thread_time()
hashlib.sha256(blob).hexdigest()
stages["sha256"] = time.thread_time() - t
stages["startup"] = first[0] if first else 0.0
print(json.dumps({"wall": wall, "cpu": cpu, **stages}))
"""


def run(argv: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import running_server  # the tests' throwaway server

    WORK.mkdir(parents=True, exist_ok=True)
    with running_server() as server:
        url = data.load_postgres(server.url, f"bench_{args.rows}", args.rows)
        tool_out = WORK / "psql.csv"
        psql = ["psql", url, "-c", f"\\copy (SELECT * FROM events) TO '{tool_out}' CSV HEADER"]
        run(psql)  # warm the table
        print(f"load average at the start {os.getloadavg()}", flush=True)
        for _ in range(args.repeat):
            wall, cpu, _ = run(psql)
            print(f"psql \\copy: wall {wall:.2f} s, client CPU {cpu:.2f} s", flush=True)
            for dialect in ("egress", "postgres"):
                out = WORK / f"out-{dialect}"
                shutil.rmtree(out, ignore_errors=True)
                wall, cpu, line = run([sys.executable, "-c", CHILD, url, str(out), dialect])
                got = json.loads(line)
                stages = ", ".join(f"{k} {got[k]:.2f}" for k in (
                    "startup", "reading", "committing", "sha256", "server"))
                print(f"egress {dialect:>8}: wall {wall:.2f} s, CPU {cpu:.2f} s "
                      f"({stages})", flush=True)
                shutil.rmtree(out, ignore_errors=True)
        print(f"load average at the end {os.getloadavg()}", flush=True)
    tool_out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
