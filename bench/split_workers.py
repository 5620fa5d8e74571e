"""One big PostgreSQL table split over 1, 2 and 4 worker processes (issue 13).

    .venv/bin/python bench/split_workers.py [--rows 5000000] [--workers 1,2,4]
        [--formats csv,parquet] [--ranges 4]

Loads the bench's ``events`` table (bench/data.py) into a throwaway PostgreSQL server,
then for each format and worker count queues one export of the table split into RANGES
key ranges (the same plan for every worker count, so only the workers change) on a
PostgreSQL job store in the same server, and drains it with N ``egress worker
--exit-when-idle`` processes of concurrency 1. Prints the wall time from the workers'
start to the last exit, the speed-up against one worker, and the CPU seconds of each
role: the workers (reading, encoding, writing, their store calls), the PostgreSQL
server (the source's reads and the store), and the rows per wall second. Every run's
files are checked to hold every row once (the manifest's row count). Prints figures;
not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from data import TABLE, load_postgres
from fleet import children_cpu_seconds, server_cpu_seconds

from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from jobsharness import drain_with_workers, write_home
from pgserver import running_server


def run(args: argparse.Namespace) -> None:
    with running_server() as server, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        source = load_postgres(server.url, "split_bench_src", args.rows)
        print(f"{args.rows:,} rows of {TABLE}, split into {args.ranges} ranges; workers of "
              "concurrency 1 on a PostgreSQL store in the same server; "
              f"{os.cpu_count()} cores")
        print("| format | workers | wall s | speed-up | rows/s | workers CPU s "
              "| PostgreSQL CPU s | CPU s total |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for fmt in args.formats.split(","):
            base: float | None = None
            for n in (int(w) for w in args.workers.split(",")):
                store_url = server.create_database(f"split_store_{fmt}_{n}_{int(time.time())}")
                home = tmp / f"home-{fmt}-{n}"
                settings = write_home(home, store_url=store_url, sources={"main": source},
                                      worker={"concurrency": 1, "poll_seconds": 0.1,
                                              "metrics_port": 0})
                store = SqlJobStore(store_url)
                store.migrate()
                export, _ = create_export(store, settings, ExportRequest(
                    source="main", tables=(TABLE,), format=fmt,
                    options={"split": args.ranges} if args.ranges > 1 else {}))
                log = tmp / f"workers-{fmt}-{n}.log"
                server0, workers0 = server_cpu_seconds(server.datadir), children_cpu_seconds()
                started = time.monotonic()
                drain_with_workers(home, n, log, timeout=3600)
                wall = time.monotonic() - started
                server_cpu = server_cpu_seconds(server.datadir) - server0
                workers_cpu = children_cpu_seconds() - workers0
                done = store.export_get(None, export.id)
                store.close()
                assert done is not None and done.state is ExportState.COMPLETED, (
                    done, log.read_text()[-2000:])
                rows = sum(t["rows"] for t in done.manifest["tables"])
                assert rows == args.rows, (rows, args.rows)
                shutil.rmtree(export_root(settings, done), ignore_errors=True)
                base = base or wall
                print(f"| {fmt} | {n} | {wall:.1f} | {base / wall:.2f}x | "
                      f"{args.rows / wall:,.0f} | {workers_cpu:.1f} | {server_cpu:.1f} | "
                      f"{workers_cpu + server_cpu:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--formats", default="csv,parquet")
    parser.add_argument("--ranges", type=int, default=4, help="1: not split (one task)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
