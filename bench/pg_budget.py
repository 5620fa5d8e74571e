"""CPU seconds per stage of a PostgreSQL export, per format, with ``psql \\copy`` in turns.

    flock /tmp/egress-bench.lock .venv/bin/python bench/pg_budget.py --rows 1000000
    .venv/bin/python bench/pg_budget.py --rows 1000000 --formats csv,jsonl,parquet
    .venv/bin/python bench/pg_budget.py --rows 1000000 --formats parquet,parquet.none --duckdb

Each export runs in a fresh process (bench/child.py's way: ``egress.export`` into a new
directory). ``csvpg`` is CSV in the postgres dialect (the server writes the CSV);
``parquet`` is zstd, ``parquet.none`` uncompressed. With ``--duckdb`` DuckDB's ``COPY …
TO 'f.parquet'`` (bench/tools.py) takes its turn in every round for each Parquet codec,
with its server CPU measured the same way. Stages:

- start-up: process CPU before the first part is read (Python, imports, connections, the
  catalog, planning);
- read-ahead: the thread that reads pages from the driver (``PageReader._run``: ADBC's
  binary COPY into Arrow, the casts of ``conform``); none in the postgres dialect;
- encode: the calling thread in ``Task.read_part`` (waiting aside: encoding, compressing;
  the postgres dialect: libpq's reads, joining rows, parsing the last key);
- commit: the committer thread in ``Task.commit_part`` (``pwrite``, ``fsync``, CRC32C,
  the checkpoint file);
- SHA-256: the sink's thread, timed here on the output's bytes;
- server: every PostgreSQL process's CPU during the run (``/proc``: the postmaster, its
  live children, and what it collected from the backends that ended), for egress and
  for ``psql`` alike.

The budget on two cores: a run cannot end before its start-up (one thread, before any
row is asked) plus the rest of egress's CPU and the server's shared by two cores, nor
before its start-up plus its busiest thread, nor before its start-up plus the busiest
server process (the backend that runs the COPY: one process, so its CPU is serial, and
it starts only when egress asks for rows). The busiest backend is sampled from ``/proc``
every 20 ms while the run lasts (its last 20 ms may be missed: the floor only gets
lower). Each egress line prints that floor and which bound sets it. Prints figures; not
a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import data

ROOT = Path(__file__).resolve().parent.parent
WORK = Path("/tmp/egress-bench/budget")
FORMATS = ("csv", "csvpg", "jsonl", "parquet", "parquet.none", "parquet.zstd")

CHILD = r"""
import hashlib, json, os, sys, time
started = time.perf_counter()
from egress.memory import use_system_allocator
use_system_allocator()
import egress
from egress.engine import readahead
from egress.engine import slice as slice_mod

url, out, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
fmt, _, compression = fmt.partition(".")
stages = {"read-ahead": 0.0, "encode": 0.0, "commit": 0.0}
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

slice_mod.Task.read_part = timed("encode", slice_mod.Task.read_part)
slice_mod.Task.commit_part = timed("commit", slice_mod.Task.commit_part)
readahead.PageReader._run = timed("read-ahead", readahead.PageReader._run)
options = {"csv_dialect": "postgres"} if fmt == "csvpg" else {}
egress.export(url, ["events"], to=out, format="csv" if fmt == "csvpg" else fmt,
              compression=compression or None, options=options)
wall = time.perf_counter() - started
cpu = time.process_time()
t = time.thread_time()
size = 0
for root, _, names in os.walk(out):
    for name in names:
        blob = open(os.path.join(root, name), "rb").read()
        size += len(blob)
        hashlib.sha256(blob).hexdigest()
stages["sha256"] = time.thread_time() - t
stages["start-up"] = first[0] if first else 0.0
print(json.dumps({"wall": wall, "cpu": cpu, "bytes": size, **stages}))
"""

STAGES = ("start-up", "read-ahead", "encode", "commit", "sha256")


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name; None once it ended."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children_of(pid: int) -> list[int]:
    """The processes ``pid`` started and has not reaped. The kernel's list of them is
    read where it has one: scanning all of ``/proc`` every 20 ms cost the sampler ~9 % of
    a core, taken from the run it measures."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(child) for child in f.read().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN
        found = []
        for entry in os.scandir("/proc"):
            fields = _stat_fields(entry.name) if entry.name.isdigit() else None
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry.name))
        return found


def _server_processes(datadir: Path) -> tuple[int, dict[int, int]]:
    """The postmaster's pid, and the CPU ticks of each process it started (``/proc``)."""
    postmaster = int((datadir / "data" / "postmaster.pid").read_text().split()[0])
    ticks: dict[int, int] = {}
    fields = _stat_fields(postmaster)
    if fields is not None:
        # utime stime cutime cstime: with the children it has reaped
        ticks[postmaster] = sum(int(x) for x in fields[11:15])
    for child in _children_of(postmaster):
        fields = _stat_fields(child)
        if fields is not None:  # None: ended meanwhile
            ticks[child] = int(fields[11]) + int(fields[12])
    return postmaster, ticks


def server_cpu(datadir: Path) -> float:
    """CPU seconds of the server so far: the postmaster, its live children, and the
    children it has reaped (their times are added to the postmaster's)."""
    return sum(_server_processes(datadir)[1].values()) / os.sysconf("SC_CLK_TCK")


class BusiestBackend:
    """Samples the server's processes while a run lasts: the most CPU that one of the
    processes started meanwhile used (the backend that served the COPY)."""

    def __init__(self, datadir: Path) -> None:
        self._datadir = datadir
        self._before = set(_server_processes(datadir)[1])
        self._ticks: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            postmaster, children = _server_processes(self._datadir)
            for pid, ticks in children.items():
                if pid != postmaster and pid not in self._before:
                    self._ticks[pid] = max(ticks, self._ticks.get(pid, 0))
            if self._done.wait(0.02):
                return

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return max(self._ticks.values(), default=0) / os.sysconf("SC_CLK_TCK")


def run(argv: list[str], datadir: Path) -> tuple[float, float, float, float, str]:
    """Wall, the child's CPU, the server's CPU, the busiest backend's CPU, and the
    child's last line of output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = server_cpu(datadir)
    busiest = BusiestBackend(datadir)
    started = time.perf_counter()
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    backend = busiest.stop()
    time.sleep(0.2)  # the backend's exit reaped by the postmaster
    server = server_cpu(datadir) - server
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    out = done.stdout.strip().splitlines()
    return wall, cpu, server, backend, out[-1] if out else ""


def floor(got: dict[str, float], cpu: float, server: float, backend: float
          ) -> tuple[float, str]:
    """The two-core floor of an egress run, and the bound that sets it."""
    start = got["start-up"]
    bounds = {
        "all CPU on two cores": start + (cpu - start + server) / 2,
        "busiest thread": start + max(got[k] for k in ("read-ahead", "encode", "commit")),
        "the COPY's backend": start + backend,
    }
    which = max(bounds, key=lambda k: bounds[k])
    return bounds[which], which


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--formats", default="csv,csvpg",
                        help=f"comma separated, of {', '.join(FORMATS)} (default csv,csvpg)")
    parser.add_argument("--duckdb", action="store_true",
                        help="time DuckDB's COPY to Parquet too, for each Parquet codec")
    args = parser.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}; known: {', '.join(FORMATS)}")
    sys.path.insert(0, str(ROOT / "tests"))
    import tools
    from measure import compile_egress

    from pgserver import running_server  # the tests' throwaway server

    compile_egress()
    codecs = sorted({"none" if f == "parquet.none" else "zstd"
                     for f in formats if f.startswith("parquet")})
    duckdb = tools.ensure_duckdb_env(tools.DEFAULT_DUCKDB_ENV) if args.duckdb else None

    WORK.mkdir(parents=True, exist_ok=True)
    with running_server() as server:
        url = data.load_postgres(server.url, f"bench_{args.rows}", args.rows)
        tool_out = WORK / "psql.csv"
        psql = ["psql", url, "-c", f"\\copy (SELECT * FROM events) TO '{tool_out}' CSV HEADER"]
        run(psql, server.datadir)  # warm the table
        print(f"load average at the start {os.getloadavg()}", flush=True)
        for _ in range(args.repeat):
            wall, cpu, pg, backend, _ = run(psql, server.datadir)
            print(f"psql \\copy   : wall {wall:.2f} s, client CPU {cpu:.2f} s, "
                  f"server CPU {pg:.2f} s (its backend {backend:.2f} s)", flush=True)
            for codec in codecs if duckdb is not None else ():
                target = WORK / f"duckdb-{codec}.parquet"
                tool = tools.duckdb_tool(duckdb, "postgres", url, "events", target,
                                         "uncompressed" if codec == "none" else codec)
                wall, cpu, pg, backend, _ = run(tool.argv, server.datadir)
                print(f"DuckDB {codec:>5}: wall {wall:.2f} s, CPU {cpu:.2f} s, server CPU "
                      f"{pg:.2f} s, {target.stat().st_size / 1e6:.0f} MB; 1.2x is "
                      f"{1.2 * wall:.2f} s", flush=True)
                target.unlink()
            for fmt in formats:
                out = WORK / f"out-{fmt}"
                shutil.rmtree(out, ignore_errors=True)
                wall, cpu, pg, backend, line = run(
                    [sys.executable, "-c", CHILD, url, str(out), fmt], server.datadir)
                got = json.loads(line)
                stages = ", ".join(f"{k} {got[k]:.2f}" for k in STAGES)
                # the export's own, not the SHA-256 timed after it
                wall, cpu = got["wall"], got["cpu"]
                least, bound = floor(got, cpu, pg, backend)
                print(f"egress {fmt:>7}: wall {wall:.2f} s, CPU {cpu:.2f} s, server CPU "
                      f"{pg:.2f} s (busiest backend {backend:.2f} s), "
                      f"{got['bytes'] / 1e6:.0f} MB ({stages}); two-core floor "
                      f"{least:.2f} s ({bound})", flush=True)
                shutil.rmtree(out, ignore_errors=True)
        print(f"load average at the end {os.getloadavg()}", flush=True)
    tool_out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
