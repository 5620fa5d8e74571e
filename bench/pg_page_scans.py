"""The PostgreSQL server's CPU for one table read three ways: what keyset pages cost it.

    .venv/bin/python bench/pg_page_scans.py postgresql://postgres@127.0.0.1:PORT/ev1000000

The URL names a database holding the bench's ``events`` table (bench/data.py's
``load_postgres``, dense ids from 1). Each route streams every row as binary COPY (the
form egress's driver reads) into nothing, on one connection whose backend's CPU is read
from ``/proc`` (so the server must run on this machine), three rounds taking turns:

- ``seq``: one ``COPY (SELECT * FROM events)``: a sequential scan, the least the server
  can do;
- ``keyset``: egress's pages: a transaction and a ``COPY (… WHERE id > last ORDER BY id
  LIMIT n)`` per part of ``--part-rows`` rows (an index scan), as an export reads them;
- ``ctid``: DuckDB's way: the same transactions over ranges of heap pages (``ctid >=
  '(a,0)' AND ctid < '(b,0)'``, a TID range scan), parts of about the same rows. Its
  pages are not stable across a resume (an update moves a row), so egress cannot page
  this way; the route measures what that would save.

Prints each run's server CPU seconds, wall time and bytes; not a test.
"""

from __future__ import annotations

import argparse
import time

import psycopg
from api_latency import cpu_seconds as backend_cpu


def drain(conn: psycopg.Connection, statement: str) -> int:
    """Bytes of one ``COPY … TO STDOUT`` read and dropped, in its own transaction."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    size = 0
    with conn.cursor().copy(statement) as copy:
        while data := copy.read():
            size += len(data)
    conn.execute("ROLLBACK")
    return size


def statements(route: str, rows: int, heap_pages: int, part_rows: int) -> list[str]:
    """The COPY statements that read the whole table by ``route``."""
    copy = "COPY ({}) TO STDOUT (FORMAT binary)"
    if route == "seq":
        return [copy.format("SELECT * FROM events")]
    if route == "keyset":  # dense ids: a part's last key is known without reading it
        return [copy.format(f"SELECT * FROM events WHERE id > {after} ORDER BY id "
                            f"LIMIT {part_rows}") for after in range(0, rows, part_rows)]
    step = max(1, round(heap_pages * part_rows / rows))
    return [copy.format(f"SELECT * FROM events WHERE ctid >= '({a},0)'::tid "
                        f"AND ctid < '({a + step},0)'::tid")
            for a in range(0, heap_pages + 1, step)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--part-rows", type=int, default=55_475,
                        help="rows a part (default: a 16 MiB Parquet row group of the table)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with psycopg.connect(args.url, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        rows, heap_pages = conn.execute(
            "SELECT count(*), (SELECT relpages FROM pg_class WHERE relname = 'events') "
            "FROM events").fetchone()  # type: ignore[misc]
        for _ in range(args.rounds):
            for route in ("seq", "keyset", "ctid"):
                work = statements(route, rows, heap_pages, args.part_rows)
                cpu, started = backend_cpu(pid), time.perf_counter()
                size = sum(drain(conn, statement) for statement in work)
                print(f"{route:>6}: server CPU {backend_cpu(pid) - cpu:.2f} s, wall "
                      f"{time.perf_counter() - started:.2f} s, {size:,} bytes in "
                      f"{len(work)} COPY", flush=True)


if __name__ == "__main__":
    main()
