"""A realistic demo database, built fast and deterministically with recursive CTEs.

Tables (``rows`` sizes the largest, ``events``)::

    users       rows/100   unicode names, bios with commas/quotes/newlines, BLOB avatars,
                           DATE, DATETIME, TIMESTAMPTZ, DECIMAL(12,2), BOOLEAN, JSON, NULLs
    products    rows/500   a TEXT primary key, DECIMAL prices, REAL weights, JSON tags
    orders      rows/10    foreign keys, quantities, totals, statuses, TIMESTAMPTZ, DATE
    events      rows       the big one: kinds, times, durations, amounts, JSON properties
    edge_cases  12         no primary key (exported in rowid order): 64-bit extremes,
                           ±inf, the smallest double, '' versus NULL, control characters…

Every value is a function of the row number, so two builds hold the same data and
their exports are byte-identical. The file is built under a temporary name and renamed
when complete: an interrupted build is never mistaken for a finished one.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

#: Bumped whenever the schema or the data changes, so that an older file is rebuilt.
DEMO_VERSION = 1
DEFAULT_ROWS = 1_000_000

SCHEMA = """
CREATE TABLE users (
  id INTEGER PRIMARY KEY,
  email TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  bio TEXT,
  country TEXT,
  is_admin BOOLEAN NOT NULL,
  balance DECIMAL(12,2),
  birthday DATE,
  signed_up_at DATETIME NOT NULL,
  last_seen_at TIMESTAMPTZ,
  avatar BLOB,
  settings JSON
);
CREATE TABLE products (
  sku TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT,
  price DECIMAL(10,2) NOT NULL,
  weight_kg REAL,
  in_stock BOOLEAN NOT NULL,
  tags JSON,
  added_on DATE NOT NULL
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  user_id INTEGER NOT NULL REFERENCES users(id),
  product_sku TEXT NOT NULL REFERENCES products(sku),
  quantity INTEGER NOT NULL,
  total DECIMAL(12,2) NOT NULL,
  status TEXT NOT NULL,
  placed_at TIMESTAMPTZ NOT NULL,
  shipped_on DATE,
  gift_note TEXT
);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  user_id INTEGER,
  kind TEXT NOT NULL,
  occurred_at TIMESTAMPTZ NOT NULL,
  duration_ms REAL,
  amount DECIMAL(12,2),
  success BOOLEAN,
  properties JSON
);
CREATE TABLE edge_cases (
  label TEXT,
  big INTEGER,
  ratio REAL,
  exact DECIMAL(20,6),
  note TEXT,
  raw BLOB,
  flag BOOLEAN,
  day DATE,
  local_time DATETIME,
  instant TIMESTAMPTZ,
  doc JSON
);
"""

# ``n(i)`` counts 1..count; ``h`` spreads i over 0..2^32 deterministically (Knuth's multiplier).
_SERIES = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count) "
_H = "((i * 2654435761) % 4294967296)"

USERS = _SERIES + f"""
INSERT INTO users SELECT
  i,
  'user' || i || '@example.com',
  CASE i % 10
    WHEN 0 THEN 'Ada Lovelace' WHEN 1 THEN 'José Martínez' WHEN 2 THEN 'Zoë "Z" O''Brien'
    WHEN 3 THEN 'Łukasz Żółć' WHEN 4 THEN '山田 太郎' WHEN 5 THEN 'Дмитрий Шостакович'
    WHEN 6 THEN 'محمد علي' WHEN 7 THEN 'Adaeze, Ngozi' WHEN 8 THEN 'Emoji Fan 😀🚀'
    ELSE 'Grace Hopper' END || ' #' || i,
  CASE i % 7
    WHEN 0 THEN NULL
    WHEN 1 THEN 'First line' || char(10) || 'second line'
    WHEN 2 THEN 'Likes "quotes", commas, and; semicolons'
    WHEN 3 THEN ''
    WHEN 4 THEN 'Tab' || char(9) || 'separated, CRLF' || char(13) || char(10) || 'end'
    WHEN 5 THEN 'Café ☕ — naïve façade'
    ELSE 'Plain bio' END,
  CASE i % 6 WHEN 0 THEN 'DE' WHEN 1 THEN 'US' WHEN 2 THEN 'JP' WHEN 3 THEN 'BR'
    WHEN 4 THEN 'NG' ELSE NULL END,
  i % 50 = 0,
  CASE WHEN i % 9 = 0 THEN NULL ELSE round(({_H} % 10000000) / 100.0 - 10000, 2) END,
  CASE WHEN i % 5 = 0 THEN NULL ELSE date('1950-01-01', '+' || ({_H} % 20000) || ' days') END,
  datetime(1577836800 + i * 600, 'unixepoch'),
  CASE WHEN i % 4 = 0 THEN NULL
    ELSE strftime('%Y-%m-%d %H:%M:%f', 1700000000 + {_H} % 30000000, 'unixepoch')
      || CASE i % 3 WHEN 0 THEN '+00:00' WHEN 1 THEN '+05:30' ELSE '-08:00' END END,
  CASE WHEN i % 3 = 0 THEN NULL
    ELSE CAST(x'89504e470d0a1a0a0000000d' || printf('%08x', {_H}) AS BLOB) END,
  CASE WHEN i % 8 = 0 THEN NULL
    ELSE json_object('theme', CASE i % 2 WHEN 0 THEN 'dark' ELSE 'light' END,
                     'langs', json_array('en', CASE i % 3 WHEN 0 THEN 'de' ELSE 'ja' END),
                     'beta', json(CASE WHEN i % 5 = 0 THEN 'true' ELSE 'false' END)) END
FROM n
"""

PRODUCTS = _SERIES + f"""
INSERT INTO products SELECT
  printf('SKU-%06d', i),
  CASE i % 4 WHEN 0 THEN 'Mug "Classic"' WHEN 1 THEN 'Chair, oak' WHEN 2 THEN 'Tee – size M'
    ELSE 'Lamp ✨' END || ' ' || i,
  CASE WHEN i % 5 = 0 THEN NULL ELSE 'Line 1' || char(10) || 'Line 2, with a comma' END,
  round(1 + ({_H} % 99900) / 100.0, 2),
  CASE WHEN i % 11 = 0 THEN NULL ELSE ({_H} % 50000) / 1000.0 END,
  i % 3 <> 0,
  json_array('tag' || (i % 7), 'tag' || (i % 13)),
  date('2015-01-01', '+' || (i % 3000) || ' days')
FROM n
"""

ORDERS = _SERIES + f"""
INSERT INTO orders SELECT
  i,
  1 + {_H} % :users,
  printf('SKU-%06d', 1 + (i * 7919) % :products),
  1 + i % 5,
  round((1 + i % 5) * (1 + ({_H} % 99900) / 100.0), 2),
  CASE i % 5 WHEN 0 THEN 'pending' WHEN 1 THEN 'paid' WHEN 2 THEN 'shipped'
    WHEN 3 THEN 'delivered' ELSE 'refunded' END,
  strftime('%Y-%m-%d %H:%M:%S', 1672531200 + i * 30, 'unixepoch') || '+00:00',
  CASE WHEN i % 5 IN (2, 3) THEN date(1672531200 + i * 30 + 86400 * 2, 'unixepoch') END,
  CASE WHEN i % 20 = 0 THEN 'Happy birthday, "dear" friend!' || char(10) || '— Sam' END
FROM n
"""

EVENTS = _SERIES + f"""
INSERT INTO events SELECT
  i,
  CASE WHEN i % 13 = 0 THEN NULL ELSE 1 + {_H} % :users END,
  CASE i % 5 WHEN 0 THEN 'page_view' WHEN 1 THEN 'click' WHEN 2 THEN 'sign_in'
    WHEN 3 THEN 'purchase' ELSE 'search' END,
  strftime('%Y-%m-%d %H:%M:%f', 1704067200 + i * 3 + (i % 1000) / 1000.0, 'unixepoch') || 'Z',
  CASE WHEN i % 97 = 0 THEN NULL ELSE ({_H} % 100000) / 100.0 END,
  CASE WHEN i % 5 = 3 THEN round(((i * 48271) % 1000000) / 100.0, 2) END,
  CASE WHEN i % 17 = 0 THEN NULL ELSE i % 3 <> 0 END,
  CASE WHEN i % 10 = 0 THEN NULL
    ELSE json_object('path', '/p/' || (i % 500), 'ms', i % 1000,
                     'ok', json(CASE WHEN i % 2 THEN 'true' ELSE 'false' END)) END
FROM n
"""

EDGE_CASES = [
    ("int64 max", 9223372036854775807, 1.7976931348623157e308, "99999999.75",
     "max", b"\xff" * 8, 1, "9999-12-31", "9999-12-31 23:59:59.999999",
     "9999-12-31 23:59:59.999999+00:00", '{"n": 9223372036854775807}'),
    ("int64 min", -9223372036854775808, -1.7976931348623157e308, "-123456789.125",
     "min", b"\x00" * 8, 0, "0001-01-01", "0001-01-01 00:00:00",
     "0001-01-01 00:00:00+00:00", '{"n": -9223372036854775808}'),
    ("+infinity", 1, float("inf"), "0.000001", "inf", b"", 1, "2000-02-29",
     "2000-02-29 12:00:00", "2000-02-29 12:00:00+14:00", "[]"),
    ("-infinity", -1, float("-inf"), "-0.000001", "-inf", b"\x00", 0, "1970-01-01",
     "1970-01-01 00:00:00", "1970-01-01 00:00:00-12:00", "{}"),
    ("smallest double", 0, 5e-324, "0", "", b"\x00\x01\x02", None, None, None, None, "null"),
    ("all null", None, None, None, None, None, None, None, None, None, None),
    ("empty vs null", 0, 0.0, "0.5", "", b"", 0, None, None, None, '""'),
    ("quotes and commas", 42, 3.14159, "3.14", 'She said "hi", then left; OK?', b"\"',",
     1, "2024-01-01", "2024-01-01 00:00:00", "2024-01-01 00:00:00Z", '{"q": "\\"quoted\\""}'),
    ("line breaks", 7, 2.5, "2.5", "a\r\nb\nc\rd", b"\r\n", 1, "2024-06-30",
     "2024-06-30 23:59:59", "2024-06-30 23:59:59+00:00", '{"text": "line\\nbreak"}'),
    ("control characters", 8, -0.0, "-0.5", "tab\there\x01\x1f bell\x07", b"\x07\x1b",
     0, "2024-07-01", "2024-07-01 00:00:00.5", "2024-07-01 00:00:00.5+00:00", '{"c": "\\u0001"}'),
    ("unicode", 9, 1e-10, "1000000", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ 中文 العربية עברית 🚀 e\u0301",
     "ü".encode(), 1, "2024-12-25", "2024-12-25 08:30:00", "2024-12-25 08:30:00+09:00",
     '{"ключ": "значение", "emoji": "😀"}'),
    ("json nested", 10, 1e15, "1e3", "nested", None, 1, "2025-01-01",
     "2025-01-01 00:00:00", "2025-01-01 00:00:00+00:00",
     '{"a": [1, 2.5, {"b": null, "c": [true, false]}], "d": {"e": "f"}}'),
]


@dataclass(frozen=True)
class DemoSizes:
    events: int
    orders: int
    users: int
    products: int

    @classmethod
    def for_rows(cls, rows: int) -> DemoSizes:
        rows = max(1, rows)
        return cls(
            events=rows,
            orders=max(1, rows // 10),
            users=max(100, rows // 100),
            products=max(50, min(5000, rows // 500)),
        )


def demo_db_path(directory: Path, rows: int) -> Path:
    return directory / f"demo-{rows}.db"


def is_current(path: Path) -> bool:
    """Whether ``path`` is a finished demo database of this version."""
    if not path.is_file():
        return False
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
    except sqlite3.Error:
        return False
    return bool(version == DEMO_VERSION)


def build_demo_db(path: Path, rows: int = DEFAULT_ROWS) -> Path:
    """Build the demo database at ``path`` (replacing any file there); returns ``path``."""
    sizes = DemoSizes.for_rows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".building")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        # a scratch file until the rename: no journal and no fsync make the build fast
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.executescript(SCHEMA)
        named = {"users": sizes.users, "products": sizes.products}
        conn.execute(USERS, {"count": sizes.users})
        conn.execute(PRODUCTS, {"count": sizes.products})
        conn.execute(ORDERS, {"count": sizes.orders, **named})
        conn.execute(EVENTS, {"count": sizes.events, **named})
        conn.executemany(
            "INSERT INTO edge_cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", EDGE_CASES
        )
        conn.execute(f"PRAGMA user_version = {DEMO_VERSION}")
        conn.commit()
    finally:
        conn.close()
    os.replace(tmp, path)
    return path


def ensure_demo_db(directory: Path, rows: int = DEFAULT_ROWS) -> tuple[Path, bool]:
    """The demo database for ``rows`` in ``directory``, built if missing; (path, built)."""
    path = demo_db_path(directory, rows)
    if is_current(path):
        return path, False
    return build_demo_db(path, rows), True
