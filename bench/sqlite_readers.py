"""SQLite to Arrow: the readers there are, on the bench table (is a faster one to be had?).

    .venv/bin/python bench/sqlite_readers.py [--rows 1000000] [--rounds 3] [--readers adbc,…]

The read is the critical path of a SQLite export to uncompressed Parquet (docs/benchmarks.md,
sessions 21-23), so this times the one thing a reader does: the bench's ``events`` table
(bench/data.py) into Arrow record batches, dropped as they come, in key order. Each reader
runs in a fresh process, in turns, and reports the CPU seconds of the reading thread and of
the whole process after its imports:

- ``adbc``: the ADBC SQLite driver, the table in one query (egress's venv);
- ``adbc-pages``: the same driver as egress reads a table: keyset pages of 27,000 rows,
  each query led by a marker row that fixes the column types (``SELECT 1, 0, '', …
  UNION ALL SELECT * FROM (SELECT 0, … ORDER BY id LIMIT ?)``, sources/sqlite.py);
- ``adbc-bare``: the same pages without the marker row (the driver then infers each
  column's type from a page's first batch of rows, which an all-NULL start gets wrong);
- ``connectorx``: ``read_sql(…, return_type="arrow_stream")`` (Rust, rusqlite);
- ``duckdb``: DuckDB's sqlite scanner, one thread, ``fetch_record_batch``.

connectorx and DuckDB come from the bench's DuckDB virtualenv (bench/tools.py). The
``amount`` column is left out of the whole-table reads: connectorx types a column by its
first row's value and refuses the table's first row, whose ``amount`` is NULL. The page
readers read every column, as egress does.
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
#: the pages read every column, as egress's query does (amount too)
PAGE_COLUMNS = "id, user_id, CAST(created_at AS TEXT), kind, amount, payload, flag"
PAGE = f"SELECT {PAGE_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?"
MARKED = (f"SELECT 1, 0, 0, '', '', 0.0, '', 0 UNION ALL SELECT * FROM (SELECT 0, "
          f"{PAGE_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?)")

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
elif kind.startswith("adbc-"):
    import adbc_driver_sqlite.dbapi as adbc
    conn = adbc.connect(f"file:{path}?mode=ro")
    marked = kind == "adbc-pages"
    def batches():
        after, page = -1, 27_000
        while True:
            with conn.cursor() as cur:
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": "16384"})
                cur.execute(query, parameters=(after, page))
                got = [b for b in cur.fetch_record_batch() if b.num_rows]
            if marked:
                got[0] = got[0].slice(1)
            yield from got
            if sum(b.num_rows for b in got) < page:
                return
            after = got[-1].column(int(marked))[-1].as_py()
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
    parser.add_argument("--readers", default="adbc,adbc-pages,adbc-bare,connectorx,duckdb",
                        help="comma-separated, of the default's")
    args = parser.parse_args()
    path = data.sqlite_db(args.workdir, args.rows)
    other = tools.ensure_duckdb_env(args.duckdb_env)
    readers = {"adbc": (Path(sys.executable), QUERY), "adbc-pages": (Path(sys.executable), MARKED),
               "adbc-bare": (Path(sys.executable), PAGE), "connectorx": (other, QUERY),
               "duckdb": (other, QUERY)}
    print(f"{args.rows:,} rows of {path.name}, {COLUMNS}: reading thread / whole process, "
          "CPU s")
    for round_ in range(1, args.rounds + 1):
        for kind in args.readers.split(","):
            python, query = readers[kind]
            done = subprocess.run([str(python), "-c", _READER, kind, str(path), query],
                                  capture_output=True, text=True, check=True)
            rows, thread, process = done.stdout.splitlines()[-1].split()
            print(f"round {round_} {kind:>10}: {int(rows):,} rows, {thread} / {process}",
                  flush=True)


if __name__ == "__main__":
    main()
