"""What PostgreSQL CSV costs when the server writes the bytes (issue #12's route).

    .venv/bin/python bench/pg_copy_passthrough.py [--rows 1000000] [--repeat 2]

Not egress: a prototype of the data path with the least client work egress could have.
Each page is ``COPY (SELECT * FROM events WHERE id > :last ORDER BY id LIMIT n) TO
STDOUT (FORMAT csv)`` streamed by psycopg into one file, then the page's row count and
last key by a second, index-only query in the same REPEATABLE READ transaction (a
resumable export needs both), in a fresh Python process without egress's imports.
``psql \\copy (SELECT * FROM events) … CSV HEADER`` runs in turns with it, on the same
throwaway server and table as bench/run.py. If this floor is above the issue's 1.15×
``psql``, no pass-through in egress (which adds its start-up and checkpoints) meets it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import data

ROOT = Path(__file__).resolve().parent.parent
OUT = Path("/tmp/egress-bench/passthrough.csv")

# Run in a fresh process: argv = URL, output file, rows per page.
PASSTHROUGH = r"""
import os, sys, time
import psycopg
started = time.perf_counter()
url, out, page = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
rows, after = 0, None
with psycopg.connect(url) as conn:
    while True:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        where = "" if after is None else f"WHERE id > {int(after)}"
        pick = f"SELECT * FROM events {where} ORDER BY id LIMIT {page}"
        with conn.cursor().copy(f"COPY ({pick}) TO STDOUT (FORMAT csv)") as copy:
            os.write(fd, b"".join(bytes(chunk) for chunk in copy))
        got, last = conn.execute(f"SELECT count(*), max(id) FROM ({pick}) AS p").fetchone()
        conn.execute("COMMIT")
        rows += got
        if got < page:
            break
        after = last
os.fsync(fd)
os.close(fd)
print(f"{rows} rows")
"""


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import running_server  # the tests' throwaway server

    OUT.parent.mkdir(parents=True, exist_ok=True)
    with running_server() as server:
        url = data.load_postgres(server.url, f"bench_{args.rows}", args.rows)
        psql = ["psql", url, "-c",
                f"\\copy (SELECT * FROM events) TO '{OUT}' CSV HEADER"]
        timed(psql)  # warm the table
        for _ in range(args.repeat):
            print(f"psql \\copy: {timed(psql):.2f} s", flush=True)
            for page in (27_000, 100_000):
                seconds = timed([sys.executable, "-c", PASSTHROUGH, url, str(OUT), str(page)])
                print(f"pass-through, pages of {page:,} rows: {seconds:.2f} s", flush=True)
    OUT.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
