"""The benchmark's ``events`` table, generated deterministically in SQLite and PostgreSQL.

Every value is a function of the row number ``i`` (``h`` spreads it over 0..2^32), so
both sources hold the same rows and two builds are identical. Roughly 310 bytes of CSV a
row: a payload text of 160-290 characters with quotes, commas, LF, CRLF and unicode
(5 % NULL), an amount with 25 % NULL.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

#: Bumped whenever the schema or the data changes, so that a cached file is rebuilt.
DATA_VERSION = 1
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


def _values(h: str, nl: str, cr: str, created_at: str, amount: str, flag: str) -> str:
    """The SELECT list of one generated row; the arguments are dialect-specific SQL."""
    return f"""
  i,
  1 + {h} % 100000,
  {created_at},
  CASE {h} % 5 WHEN 0 THEN 'page_view' WHEN 1 THEN 'click' WHEN 2 THEN 'purchase'
    WHEN 3 THEN 'sign_in' ELSE 'search' END,
  CASE WHEN i % 4 = 0 THEN NULL ELSE {amount} END,
  CASE WHEN i % 20 = 0 THEN NULL ELSE
    CASE i % 6
      WHEN 0 THEN 'Order "' || i || '" shipped, tracking ' || {h} || {nl} || 'Grüße aus Köln ✓'
      WHEN 1 THEN 'plain note ' || i
      WHEN 2 THEN 'She said "hi", then left; OK?'
      WHEN 3 THEN 'multi' || {nl} || 'line, with commas, and "quotes"'
      WHEN 4 THEN '山田 太郎 — café naïve façade 😀'
      ELSE 'CSV,needs,quoting' || {cr} || {nl} || 'crlf' END
    || ' ' || substr('{_FILLER}', CAST(1 + {h} % 100 AS INTEGER),
                  CAST(160 + {h} % 130 AS INTEGER)) END,
  {flag}
"""


_SQLITE_H = "((i * 2654435761) % 4294967296)"
SQLITE_INSERT = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count) "
    "INSERT INTO events SELECT"
    + _values(
        _SQLITE_H, "char(10)", "char(13)",
        "strftime('%Y-%m-%d %H:%M:%f', 1704067200 + i * 3 + (i % 1000) / 1000.0, 'unixepoch')",
        "((i * 48271) % 10000000) / 100.0",
        f"{_SQLITE_H} % 3 <> 0",
    )
    + "FROM n"
)

_PG_H = "((i::bigint * 2654435761) % 4294967296)"
POSTGRES_INSERT = (
    "INSERT INTO events SELECT"
    + _values(
        _PG_H, "chr(10)", "chr(13)",
        "timestamptz '2024-01-01 00:00:00+00' + make_interval(secs => i * 3)"
        " + (i % 1000) * interval '1 millisecond'",
        "((i::bigint * 48271) % 10000000) / 100.0",
        f"{_PG_H} % 3 <> 0",
    )
    + "FROM generate_series(1, {count}) AS i"
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
