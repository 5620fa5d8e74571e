"""Helpers of the split tests: source tables with a skewed key, rows of output files."""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import sqlite3
from pathlib import Path
from typing import Any


def skewed_ids(n: int, seed: int, top: int = 10**12) -> list[int]:
    """Distinct ids: four fifths packed in [1, n], the rest spread up to ``top``."""
    rng = random.Random(seed)
    dense = list(range(1, n * 4 // 5 + 1))
    sparse: set[int] = set()
    low = n * 10 if n * 10 < top // 2 else len(dense) + 1
    while len(sparse) < n - len(dense):
        sparse.add(rng.randrange(low, top))
    return dense + sorted(sparse)


def sqlite_source(path: Path, seed: int = 3, rows: int = 30_000, top: int = 10**12) -> str:
    """``top``: the largest id; at most 200,000 keeps SQLite's row estimate exact (above,
    it is the largest rowid, and an S3 task's part budget grows its parts from it)."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, amount REAL, "
                  "at DATETIME)")
    conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", (
        (i, f"k{i % 7}, \"q\"", (i % 1000) / 8, f"2024-01-01 00:00:{i % 60:02d}")
        for i in skewed_ids(rows, seed, top)))
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def add_pairs(path: Path, rows: int) -> None:
    """A ``pairs`` table with a composite key (a, b) whose first column repeats."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE pairs (a INTEGER, b INTEGER, PRIMARY KEY (a, b))")
    conn.executemany("INSERT INTO pairs VALUES (?, ?)", ((i // 3, i) for i in range(rows)))
    conn.commit()
    conn.close()


def pg_source(pg_server: Any, name: str, rows: int = 30_000) -> str:
    import psycopg

    url = pg_server.create_database(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, kind text, amount numeric, "
                     "at timestamptz NOT NULL)")
        with conn.cursor().copy("COPY events FROM STDIN") as copy:
            for i in skewed_ids(rows, 5):
                copy.write_row((i, f"k{i % 7}", i % 1000, "2024-01-01 00:00:00+00"))
        # a timestamp key, skewed: most rows in the first hour of a year
        conn.execute("CREATE TABLE stamps (at timestamptz PRIMARY KEY, n int)")
        conn.execute("INSERT INTO stamps SELECT timestamptz '2024-01-01 00:00:00+00' + "
                     "(CASE WHEN g % 5 = 0 THEN g * interval '17 minutes' "
                     "ELSE g * interval '1 millisecond' END), g FROM generate_series(1, 20000) g")
        conn.execute("ANALYZE")
    return url


def duckdb_source(path: Path, rows: int = 30_000) -> str:
    """``events``: a skewed BIGINT key; ``words``: a VARCHAR key (DuckDB's byte order);
    ``stamps``: a TIMESTAMPTZ key, most rows in one hour."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE events (id BIGINT PRIMARY KEY, kind VARCHAR, "
                    "amount DECIMAL(10, 2), seen TIMESTAMP NOT NULL)")
        ids = pa.table({"id": pa.array(skewed_ids(rows, 9), pa.int64())})  # noqa: F841
        con.execute("INSERT INTO events SELECT id, 'k' || (id % 7) || ', \"q\"', "
                    "(id % 1000) + 0.25, TIMESTAMP '2024-01-01' + to_seconds(id % 60) "
                    "FROM ids")
        con.execute("CREATE TABLE words (w VARCHAR PRIMARY KEY, n INTEGER)")
        con.execute("INSERT INTO words SELECT chr(CAST(65 + g % 50 AS INTEGER)) || 'é' || g, g "
                    f"FROM range({rows // 2}) t(g)")
        con.execute("CREATE TABLE stamps (t TIMESTAMPTZ PRIMARY KEY, n INTEGER)")
        con.execute("INSERT INTO stamps SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' + "
                    "CASE WHEN g % 5 = 0 THEN g * INTERVAL 17 MINUTE "
                    f"ELSE g * INTERVAL 1 MILLISECOND END, g FROM range(1, {rows // 2}) t(g)")
    finally:
        con.close()
    return f"duckdb:///{path}"


def rows_of(root: Path, names: list[str], fmt: str) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for name in names:
        data = (root / name).read_bytes()
        if name.endswith(".gz"):
            data = gzip.decompress(data)  # one gzip member per part
        if fmt == "csv":
            out += [tuple(r) for r in list(csv.reader(io.StringIO(data.decode())))[1:]]
        elif fmt == "jsonl":
            out += [tuple(json.loads(line).items()) for line in data.decode().splitlines()]
        else:
            import pyarrow.parquet as pq

            out += [tuple(r.items()) for r in pq.read_table(root / name).to_pylist()]
    return out
