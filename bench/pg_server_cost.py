"""Server CPU of the COPYs an export could ask PostgreSQL for (issue #12, item 3).

    .venv/bin/python bench/pg_server_cost.py [--rows 1000000] [--rounds 10] [--copies "key order"]

Starts a throwaway server (tests/pgserver.py), loads the bench's ``events`` table
(bench/data.py) and runs each COPY below in turns on one connection, its rows read and
dropped by the client, measuring the server backend's CPU seconds (``/proc/PID/stat``).
``psql \\copy`` waits on its server, so the first line is what bounds ``psql``'s wall;
the others are in proportion to it:

- ``psql``: ``COPY events TO STDOUT (FORMAT csv, HEADER)``, a sequential scan;
- ``key order``: the postgres CSV dialect's ``COPY (SELECT … ORDER BY id)`` with
  ``enable_sort = off`` (an index scan): the order that lets every export resume exactly;
- ``row_to_json``: JSON Lines written by the server
  (``COPY … (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')``, no field quoted);
- ``json by SQL``: the same with each row's JSON concatenated in SQL in egress's text
  forms (``to_json`` for text, ``to_char`` for the timestamp).

Prints the median, range and ratio to ``psql`` of each. Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import data
from api_latency import cpu_seconds  # a process's CPU from /proc

ROOT = Path(__file__).resolve().parent.parent
ORDERED = "SELECT id, user_id, created_at, kind, amount, payload, flag FROM events ORDER BY id"
JSON_CSV = "(FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')"
COPIES = {
    "psql": "COPY events TO STDOUT (FORMAT csv, HEADER)",
    "key order": f"COPY ({ORDERED}) TO STDOUT (FORMAT csv)",
    "row_to_json": f"COPY (SELECT row_to_json(e) FROM ({ORDERED}) AS e) TO STDOUT {JSON_CSV}",
    "json by SQL": (
        "COPY (SELECT '{\"id\":' || id || ',\"user_id\":' || user_id || ',\"created_at\":\"' "
        "|| to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') "
        "|| 'Z\",\"kind\":' || to_json(kind) "
        "|| ',\"amount\":' || coalesce('\"' || amount || '\"', 'null') "
        "|| ',\"payload\":' || coalesce(to_json(payload)::text, 'null') "
        f"|| ',\"flag\":' || flag || '}}' FROM events ORDER BY id) TO STDOUT {JSON_CSV}"
    ),
}


def measure(url: str, copies: dict[str, str], rounds: int) -> dict[str, list[float]]:
    import psycopg
    from psycopg import pq

    seconds: dict[str, list[float]] = {name: [] for name in copies}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET enable_sort = off")  # as the postgres dialect's session
        pid, pgconn = conn.info.backend_pid, conn.pgconn
        for r in range(rounds):
            order = list(copies.items())
            for name, sql in order if r % 2 == 0 else reversed(order):
                before = cpu_seconds(pid)
                pgconn.send_query(sql.encode())
                result = pgconn.get_result()
                assert result is not None and result.status == pq.ExecStatus.COPY_OUT, name
                while pgconn.get_copy_data(0)[0] > 0:
                    pass
                while pgconn.get_result() is not None:
                    pass
                seconds[name].append(cpu_seconds(pid) - before)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--copies", default=",".join(COPIES),
                        help="which COPYs, comma-separated (psql always runs)")
    args = parser.parse_args()
    chosen = {"psql", *args.copies.split(",")}
    unknown = chosen - set(COPIES)
    if unknown:
        parser.error(f"unknown COPY {sorted(unknown)}; known: {', '.join(COPIES)}")
    copies = {name: sql for name, sql in COPIES.items() if name in chosen}
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import running_server  # the tests' throwaway server

    with running_server() as server:
        url = data.load_postgres(server.url, f"bench_{args.rows}", args.rows)
        measure(url, copies, 1)  # warm the table and its index
        print(f"load average {os.getloadavg()}")
        seconds = measure(url, copies, args.rounds)
        print(f"load average {os.getloadavg()}")
    base = statistics.median(seconds["psql"])
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"{name:>12}: server CPU median {median:.2f} s ({min(values):.2f}–"
              f"{max(values):.2f}), {median / base:.2f}× psql's")


if __name__ == "__main__":
    main()
