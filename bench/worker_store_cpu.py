"""CPU a worker spends in the job store per export, in one process (issue 17, item 2).

    .venv/bin/python bench/worker_store_cpu.py [--exports 300] [--rows 1000]
        [--store sqlite|postgresql] [--profile]

Queues EXPORTS one-table CSV exports of a ROWS-row SQLite table on a fresh store, then
drains them with one in-process ``Worker`` (concurrency 1, ``exit_when_idle``). Every
public method of the store is timed with ``time.thread_time`` (the outermost call only,
so a method calling another counts once), which gives the store's client CPU — building
and compiling statements, the driver, SQLite's own work in this process — apart from
reading, encoding and writing the export. Prints the store's CPU per export, the whole
process's, and the calls per export of each store method with its CPU per call.
PostgreSQL's server CPU is not in these figures (``bench/fleet.py`` reports it).
Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from fleetharness import make_rows_source
from jobsharness import write_home

_depth = threading.local()


class Tally:
    """CPU and calls per store method; with ``profile`` a cProfile of the store calls
    of every thread (one profiler per thread: cProfile follows one thread)."""

    def __init__(self, profile: bool = False) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.profile = profile
        self.profilers: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def _profiler(self) -> cProfile.Profile:
        prof = getattr(_depth, "profiler", None)
        if prof is None:
            prof = _depth.profiler = cProfile.Profile()
            with self._lock:
                self.profilers.append(prof)
        return prof

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(_depth, "n", 0)
            _depth.n = depth + 1
            prof = self._profiler() if self.profile and depth == 0 else None
            start = time.thread_time()
            if prof is not None:
                prof.enable()
            try:
                return method(*args, **kwargs)
            finally:
                if prof is not None:
                    prof.disable()
                _depth.n = depth
                if depth == 0:
                    spent = time.thread_time() - start
                    with self._lock:
                        self.cpu[name] += spent
                        self.calls[name] += 1
        return timed


def instrument(store: SqlJobStore, tally: Tally) -> None:
    for name in dir(type(store)):
        if name.startswith(("task_", "export_", "delivery_", "deliveries_", "queue_",
                            "lease_", "schema_", "secret")):
            method = getattr(store, name)
            if callable(method):
                setattr(store, name, tally.wrap(name, method))


def run(args: argparse.Namespace, store_url: str, tmp: Path) -> None:
    source = make_rows_source(tmp / "rows.db", args.rows)
    settings = write_home(tmp / "home", store_url=store_url, sources={"main": source},
                          worker={"concurrency": 1, "poll_seconds": 0.05})
    store = SqlJobStore(settings.store_url)
    store.migrate()
    try:
        request = ExportRequest(source="main", tables=("t",), format="csv")
        for _ in range(args.exports):
            create_export(store, settings, request, project="bench", active_cap=None)
        tally = Tally(profile=args.profile)
        instrument(store, tally)
        worker = Worker(store, settings, concurrency=1, name="bench-worker")
        cpu0, wall0 = time.process_time(), time.monotonic()
        worker.run(exit_when_idle=True)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        done = sum(1 for e in store.export_list("bench", limit=args.exports + 10)
                   if e.state.value == "completed")
    finally:
        store.close()
    n = args.exports
    store_cpu = sum(tally.cpu.values())
    print(f"{n} exports of {args.rows} rows ({done} completed), {args.store} store, "
          f"one worker of concurrency 1: {wall:.1f} s wall")
    print(f"process CPU per export: {cpu / n * 1000:.2f} ms; in the store: "
          f"{store_cpu / n * 1000:.2f} ms")
    print("| store method | calls/export | CPU ms/call | CPU ms/export |")
    print("|---|---:|---:|---:|")
    for name in sorted(tally.cpu, key=lambda k: -tally.cpu[k]):
        calls = tally.calls[name]
        print(f"| {name} | {calls / n:.2f} | {tally.cpu[name] / calls * 1000:.3f} | "
              f"{tally.cpu[name] / n * 1000:.2f} |")
    if tally.profilers:
        stats = pstats.Stats(tally.profilers[0])
        for prof in tally.profilers[1:]:
            stats.add(prof)
        stats.sort_stats("tottime").print_stats(35)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=300)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.store == "postgresql":
            from pgserver import running_server

            with running_server() as server:
                run(args, server.create_database("bench_store"), tmp)
        else:
            run(args, f"sqlite:///{tmp / 'store.db'}", tmp)


if __name__ == "__main__":
    main()
