"""SQLite to Arrow: the readers there are, on the bench table (is a faster one to be had?).

    .venv/bin/python bench/sqlite_readers.py [--rows 1000000] [--rounds 3]

The read is the critical path of a SQLite export to uncompressed Parquet (docs/benchmarks.md,
sessions 21-23), so this times the one thing a reader does: the bench's ``events`` table
(bench/data.py) into Arrow record batches, dropped as they come, in key order. Each reader
runs in a fresh process, in turns, and reports the CPU seconds of the reading thread and of
the whole process after its imports:

- ``adbc``: the ADBC SQLite driver, as egress reads (its own venv);
- ``connectorx``: ``read_sql(…, return_type="arrow_stream")`` (Rust, rusqlite);
- ``duckdb``: DuckDB's sqlite scanner, one thread, ``fetch_record_batch``.

connectorx and DuckDB come from the bench's DuckDB virtualenv (bench/tools.py). The
``amount`` column is left out for all three: connectorx types a column by its first row's
value and refuses the table's first row, whose ``amount`` is NULL.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import data
import tools

COLUMNS = "id, user_id, created_at, kind, payload, flag"
QUERY = f"SELECT {COLUMNS} FROM events ORDER BY id"

_READER = """
import glob, os, resource, sys, time
kind, path, query = sys.argv[1:]
if kind == "adbc":
    import adbc_driver_sqlite.dbapi as adbc
    conn = adbc.connect(f"file:{path}?mode=ro")
    cur = conn.cursor()
    cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": "16384"})
    def batches():
        cur.execute(query)
        return cur.fetch_record_batch()
elif kind == "connectorx":
    import connectorx
    def batches():
        return connectorx.read_sql(f"sqlite://{path}", query, return_type="arrow_stream",
                                   batch_size=16384)
else:
    import duckdb, duckdb_extension_sqlite_scanner as scanner
    (ext,) = glob.glob(os.path.join(os.path.dirname(scanner.__file__), "extensions", "*",
                                    "*.duckdb_extension"))
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute("SET enable_progress_bar = false")
    con.execute(f"LOAD '{ext}'")
    con.execute(f"ATTACH '{path}' AS s (TYPE sqlite, READ_ONLY)")
    def batches():
        return con.execute(query.replace("FROM events", "FROM s.events")).fetch_record_batch(16384)
def process_cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
thread0, process0, rows = time.thread_time(), process_cpu(), 0
for batch in batches():
    rows += batch.num_rows
print(rows, round(time.thread_time() - thread0, 2), round(process_cpu() - process0, 2))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/egress-bench"))
    parser.add_argument("--duckdb-env", type=Path, default=tools.DEFAULT_DUCKDB_ENV)
    args = parser.parse_args()
    path = data.sqlite_db(args.workdir, args.rows)
    other = tools.ensure_duckdb_env(args.duckdb_env)
    pythons = {"adbc": Path(sys.executable), "connectorx": other, "duckdb": other}
    print(f"{args.rows:,} rows of {path.name}, {COLUMNS}: reading thread / whole process, "
          "CPU s")
    for round_ in range(1, args.rounds + 1):
        for kind, python in pythons.items():
            done = subprocess.run([str(python), "-c", _READER, kind, str(path), QUERY],
                                  capture_output=True, text=True, check=True)
            rows, thread, process = done.stdout.splitlines()[-1].split()
            print(f"round {round_} {kind:>10}: {int(rows):,} rows, {thread} / {process}",
                  flush=True)


if __name__ == "__main__":
    main()
