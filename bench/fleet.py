"""The job store at fleet scale (issue 17): worker processes draining many small exports
from one PostgreSQL store.

    .venv/bin/python bench/fleet.py throughput [--exports 2000] [--rows 1000]
        [--workers 1,2,4,8] [--cpu none|nice|taskset]
    .venv/bin/python bench/fleet.py drain [--exports 10000] [--projects 50] [--workers 4]

``throughput``: for each worker count, a fresh store, EXPORTS one-table CSV exports of a
ROWS-row SQLite table, then N ``egress worker --exit-when-idle`` processes (concurrency 1).
Prints exports/s from the workers' start to the last exit, the claim latency p50/p99
(each worker logs ``claim_ms`` with every task it claims), and CPU seconds per export
of the PostgreSQL server and of the workers. ``--cpu nice`` runs the workers at nice 19
and ``--cpu taskset`` pins them to the second core, so that on 2 cores the store's own
cost shows instead of the workers crowding it out.

``drain``: EXPORTS exports from PROJECTS projects (created one project's block after
another) drained by N workers of concurrency 2 at the default project cap; checks none
lost and none run twice (store and outputs), the cap, and prints how long each project's
exports waited for their first claim.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_latency import cpu_seconds, postmaster, tree

from egress.store.sql import SqlJobStore
from fleetharness import create_round_robin, drain_report, make_rows_source
from jobsharness import start_worker, write_home
from pgserver import running_server


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def server_cpu_seconds(datadir: Path) -> float:
    return sum(cpu_seconds(p) for p in tree(postmaster(datadir)))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _claims(log: Path) -> list[float]:
    out = []
    for line in log.read_text().splitlines():
        if '"task claimed"' in line:
            out.append(float(json.loads(line)["claim_ms"]))
    return out


def _drain_with(home: Path, workers: int, log: Path, cpu: str) -> float:
    prefix: list[str] = []
    if cpu == "taskset" and (os.cpu_count() or 1) > 1:
        prefix = ["taskset", "-c", str((os.cpu_count() or 2) - 1)]
    env = {"EGRESS_WORKER_NICE": "19"} if cpu == "nice" else {}
    start = time.monotonic()
    procs = [_start(home, log, prefix, env) for _ in range(workers)]
    for p in procs:
        p.wait()
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        raise SystemExit(f"workers failed ({bad}); see {log}")
    return time.monotonic() - start


def _start(home: Path, log: Path, prefix: list[str], env: dict[str, str]):  # type: ignore[no-untyped-def]
    if not prefix:
        return start_worker(home, log, "--exit-when-idle", env_extra=env)
    import subprocess

    full = {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}
    full.update({"EGRESS_HOME": str(home), "EGRESS_WORKER_METRICS_PORT": "0", **env})
    with open(log, "ab") as err:
        return subprocess.Popen([*prefix, sys.executable, "-m", "egress.cli", "worker",
                                 "--exit-when-idle"], env=full, stdout=subprocess.DEVNULL,
                                stderr=err)


def throughput(args: argparse.Namespace) -> None:
    with running_server() as server, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        source = make_rows_source(tmp / "rows.db", args.rows)
        print(f"{args.exports} exports of {args.rows} rows, one project; workers of "
              f"concurrency 1; CPU share: {args.cpu}; PostgreSQL store")
        print("| workers | wall s | exports/s | claim p50 ms | claim p99 ms "
              "| store CPU ms/export | workers CPU ms/export |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in (int(w) for w in args.workers.split(",")):
            url = server.create_database(f"fleet_{n}_{int(time.time())}")
            home = tmp / f"home-{n}"
            settings = write_home(home, store_url=url, sources={"main": source},
                                  worker={"concurrency": 1, "lease_seconds": 120.0,
                                          "poll_seconds": 0.05, "project_cap": 100,
                                          "metrics_port": 0})
            store = SqlJobStore(url)
            store.migrate()
            exports = create_round_robin(store, settings, 1, args.exports)
            log = tmp / f"workers-{n}.log"
            server_before = server_cpu_seconds(server.datadir)
            workers_before = children_cpu_seconds()
            wall = _drain_with(home, n, log, args.cpu)
            server_cpu = server_cpu_seconds(server.datadir) - server_before
            workers_cpu = children_cpu_seconds() - workers_before
            report = drain_report(store, settings, exports, args.rows)
            store.close()
            assert report.completed == args.exports and not report.finished_twice, report
            claims = _claims(log)
            print(f"| {n} | {wall:.1f} | {args.exports / wall:.1f} | {_pct(claims, 0.5):.1f} "
                  f"| {_pct(claims, 0.99):.1f} | {1000 * server_cpu / args.exports:.1f} "
                  f"| {1000 * workers_cpu / args.exports:.1f} |", flush=True)


def drain(args: argparse.Namespace) -> None:
    with running_server() as server, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        source = make_rows_source(tmp / "rows.db", args.rows)
        url = server.create_database("fleet_drain")
        settings = write_home(tmp / "home", store_url=url, sources={"main": source},
                              worker={"concurrency": 2, "poll_seconds": 0.05,
                                      "metrics_port": 0})
        store = SqlJobStore(url)
        store.migrate()
        per_project = args.exports // args.projects
        created = time.monotonic()
        exports = create_round_robin(store, settings, args.projects, per_project)
        print(f"created {len(exports)} exports of {args.projects} projects in "
              f"{time.monotonic() - created:.0f} s; draining with {args.workers} workers "
              f"(concurrency 2, project_cap {settings.worker.project_cap})", flush=True)
        wall = _drain_with(settings.home, args.workers, tmp / "workers.log", "none")
        report = drain_report(store, settings, exports, args.rows)
        store.close()
    means = [statistics.fmean(w) for w in report.waits.values()]
    print(f"drained in {wall:.0f} s ({len(exports) / wall:.1f} exports/s)")
    print(f"completed {report.completed} of {report.exports}; run twice: "
          f"{len(report.finished_twice)}; wrong outputs: {len(report.wrong_outputs)}")
    print(f"most tasks of one project running at once: {max(report.most_running.values())} "
          f"(cap {settings.worker.project_cap})")
    print(f"first claim of every project within the first "
          f"{max(report.first_claim_index.values()) + 1} claims")
    print(f"wait for the first claim, mean by project: min {min(means):.1f} s, median "
          f"{statistics.median(means):.1f} s, max {max(means):.1f} s (spread "
          f"{report.spread():.2f}); longest single wait "
          f"{max(max(w) for w in report.waits.values()):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--exports", type=int, default=2000)
    t.add_argument("--rows", type=int, default=1000)
    t.add_argument("--workers", default="1,2,4,8")
    t.add_argument("--cpu", choices=("none", "nice", "taskset"), default="none")
    d = sub.add_parser("drain")
    d.add_argument("--exports", type=int, default=10_000)
    d.add_argument("--projects", type=int, default=50)
    d.add_argument("--rows", type=int, default=100)
    d.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    (throughput if args.mode == "throughput" else drain)(args)


if __name__ == "__main__":
    main()
