"""How much this machine's speed moves from minute to minute (read before comparing runs).

    .venv/bin/python bench/machine_drift.py [--rows 1000000] [--rounds 3]

Not egress: the same fixed piece of work, the ADBC SQLite driver reading the bench's
``events`` table page by page with the query egress runs (bench/data.py builds the
table), timed round after round, in turns alone and beside a busy loop on another CPU.
Prints the clock time and the work's CPU seconds per round: if one round is far from the
next with nothing else running, so are any two benchmark runs that far apart.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import adbc_driver_sqlite.dbapi as adbc_sqlite
import data

#: egress's query for the bench table (sources/sqlite.py: a marker row fixes the types)
QUERY = (
    "SELECT 1, 0, 0, '', '', 0.0, '', 0.0 UNION ALL SELECT * FROM (SELECT 0, \"id\", "
    "\"user_id\", CAST(\"created_at\" AS TEXT), \"kind\", \"amount\", \"payload\", \"flag\" "
    "FROM \"events\" WHERE \"id\" > ? ORDER BY \"id\" LIMIT ?)"
)
PAGE_ROWS = 27_000  # the pages of an uncompressed Parquet export of this table


def read_all(path: Path) -> tuple[int, float]:
    """Rows read and the CPU seconds of this thread doing it."""
    started, rows, after = time.thread_time(), 0, -1
    with adbc_sqlite.connect(f"file:{path}?mode=ro") as conn:
        while True:
            with conn.cursor() as cur:
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": "16384"})
                cur.execute(QUERY, parameters=(after, PAGE_ROWS))
                batches = [b for b in cur.fetch_record_batch() if b.num_rows]
            got = sum(b.num_rows for b in batches) - 1  # the marker row
            rows += got
            if got < PAGE_ROWS:
                return rows, time.thread_time() - started
            after = batches[-1].column(1)[-1].as_py()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/egress-bench"))
    args = parser.parse_args()
    path = data.sqlite_db(args.workdir, args.rows)
    for _ in range(args.rounds):
        for beside in (False, True):
            burner = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      if beside else None)
            try:
                rows, cpu = read_all(path)
            finally:
                if burner is not None:
                    burner.kill()
                    burner.wait()
            print(f"{time.strftime('%H:%M:%S')} {rows:,} rows in {cpu:.2f} CPU s"
                  f"{', beside a busy loop' if beside else ', alone'}", flush=True)


if __name__ == "__main__":
    main()
