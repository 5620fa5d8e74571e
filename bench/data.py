"""The benchmark's ``events`` table, generated deterministically in SQLite and PostgreSQL.

Every value is a function of the row number ``i`` (three 32-bit hashes of it, ``h``,
``g`` and ``k``, draw the columns), so both sources hold the same rows and two builds
are identical. Roughly 310 bytes of CSV a row: a payload text of 160-290 characters
with quotes, commas, LF, CRLF and unicode (5 % NULL), an amount with 25 % NULL.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

#: Bumped whenever the schema or the data changes, so that a cached file is rebuilt.
DATA_VERSION = 2
TABLE = "events"

_FILLER = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat; Duis aute irure "
    "dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur. "
    "Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt."
)

SQLITE_SCHEMA = """
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  user_id INTEGER NOT NULL,
  created_at TIMESTAMP NOT NULL,
  kind TEXT NOT NULL,
  amount NUMERIC(12,2),
  payload TEXT,
  flag BOOLEAN NOT NULL
)
"""

POSTGRES_SCHEMA = """
CREATE TABLE events (
  id bigint PRIMARY KEY,
  user_id bigint NOT NULL,
  created_at timestamptz NOT NULL,
  kind text NOT NULL,
  amount numeric(12,2),
  payload text,
  flag boolean NOT NULL
)
"""


def _hash_rows(source: str, fence: str) -> str:
    """A FROM clause adding three 32-bit hashes of ``i`` (``h``, ``g``, ``k``) to ``source``.

    Each hash is two rounds of ``x = ((x >> 16) ^ x) * 0x45d9f3b`` and a last
    ``(x >> 16) ^ x``: every output bit depends on every input bit, so the columns drawn
    from it hold no arithmetic sequence that a compressor could find again millions of rows
    later (the multiplicative hash of version 1 did, which made Parquet sizes move with the
    row groups' length). The rounds are nested subqueries so that each is computed once a
    row; ``fence`` (an ``OFFSET 0``) keeps the database from folding them into one
    expression. SQLite has no XOR operator, hence ``(a | b) - (a & b)``; the multiplier is
    below 2^31 so that no product leaves a signed 64-bit integer.
    """
    names = ("h", "g", "k")

    def xor_shift(v: str) -> str:
        return f"((({v} >> 16) | {v}) - (({v} >> 16) & {v}))"

    seeds = ", ".join(f"i + {n * 1000000007} AS {name}" for n, name in enumerate(names))
    query = f"SELECT i, {seeds} FROM {source}"
    for step in ("({} * 73244475) % 4294967296", "({} * 73244475) % 4294967296", "{}"):
        mixed = ", ".join(f"{step.format(xor_shift(name))} AS {name}" for name in names)
        query = f"SELECT i, {mixed} FROM ({query} {fence}) AS r"
    return f"({query} {fence}) AS n"


def _values(nl: str, cr: str, created_at: str) -> str:
    """The SELECT list of one generated row; the arguments are dialect-specific SQL."""
    return f"""
  i,
  1 + h % 100000,
  {created_at},
  CASE g % 5 WHEN 0 THEN 'page_view' WHEN 1 THEN 'click' WHEN 2 THEN 'purchase'
    WHEN 3 THEN 'sign_in' ELSE 'search' END,
  CASE WHEN (g >> 8) % 4 = 0 THEN NULL ELSE ((h >> 3) % 10000000) / 100.0 END,
  CASE WHEN (k >> 8) % 20 = 0 THEN NULL ELSE
    CASE k % 6
      WHEN 0 THEN 'Order "' || i || '" shipped, tracking ' || h || {nl} || 'Grüße aus Köln ✓'
      WHEN 1 THEN 'plain note ' || i
      WHEN 2 THEN 'She said "hi", then left; OK?'
      WHEN 3 THEN 'multi' || {nl} || 'line, with commas, and "quotes"'
      WHEN 4 THEN '山田 太郎 — café naïve façade 😀'
      ELSE 'CSV,needs,quoting' || {cr} || {nl} || 'crlf' END
    || ' ' || substr('{_FILLER}', CAST(1 + (k >> 16) % 100 AS INTEGER),
                  CAST(160 + (g >> 16) % 130 AS INTEGER)) END,
  (h >> 12) % 3 <> 0
"""


SQLITE_INSERT = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count) "
    "INSERT INTO events SELECT"
    + _values(
        "char(10)", "char(13)",
        "strftime('%Y-%m-%d %H:%M:%f', 1704067200 + i * 3 + (i % 1000) / 1000.0, 'unixepoch')",
    )
    + "FROM " + _hash_rows("n", "LIMIT -1 OFFSET 0")
)

POSTGRES_INSERT = (
    "INSERT INTO events SELECT"
    + _values(
        "chr(10)", "chr(13)",
        "timestamptz '2024-01-01 00:00:00+00' + make_interval(secs => i * 3)"
        " + (i % 1000) * interval '1 millisecond'",
    )
    + "FROM " + _hash_rows("generate_series(1::bigint, {count}) AS i", "OFFSET 0")
)


def sqlite_db(workdir: Path, rows: int) -> Path:
    """The SQLite database with ``rows`` events, built once and cached in ``workdir``."""
    path = workdir / f"events-{rows}-v{DATA_VERSION}.db"
    if path.exists():
        return path
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    started = time.perf_counter()
    conn = sqlite3.connect(tmp)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute(SQLITE_SCHEMA)
        with conn:
            conn.execute(SQLITE_INSERT, {"count": rows})
    finally:
        conn.close()
    os.replace(tmp, path)
    print(f"  built {path.name} in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def load_postgres(server_url: str, dbname: str, rows: int) -> str:
    """A fresh database ``dbname`` holding ``rows`` events; returns its URL."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}"')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    url = server_url.rsplit("/", 1)[0] + "/" + dbname
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(POSTGRES_SCHEMA)
        # no parameters: the statement holds % operators (our own integer, formatted)
        conn.execute(POSTGRES_INSERT.replace("{count}", str(int(rows))))
        # frozen and analysed: no reader pays for hint bits, every reader sees one plan
        conn.execute("VACUUM (FREEZE, ANALYZE) events")
    print(f"  loaded {rows:,} rows into PostgreSQL in {time.perf_counter() - started:.1f} s",
          flush=True)
    return url
