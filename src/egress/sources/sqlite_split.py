"""Boundaries of a split SQLite table: quantiles of its first key column.

The values are the column's raw stored values (what the cursor binds: the rowid, or the
key as stored), in SQLite's own order of the column. Up to :data:`EXACT_UNTIL` rows the
key column is read once in key order and every k-th value kept (exact quantiles; an
index-only pass where the key has an index). A bigger rowid table is sampled by rowid:
:data:`SAMPLES` random rowids between the smallest and the largest (seeded: one table
gives one plan), each the next existing row at or above it (O(log n) each), then sorted
by SQLite in key order; rowid gaps weigh a row a little more, never a correctness issue.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
from typing import Any

from egress.domain.ranges import quantile_bounds

EXACT_UNTIL = 2_000_000
SAMPLES = 20_000
#: Values kept per range from an exact pass (more: closer to equal counts).
PER_RANGE = 256


def split_points(conn: sqlite3.Connection, table_sql: str, key_sql: str, rowid: str | None,
                 estimate: int, count: int) -> list[Any]:
    """At most ``count - 1`` boundaries of ``key_sql`` in ``table_sql`` (both quoted by
    the source); ``rowid``: how to reach the rowid (None: a WITHOUT ROWID table)."""
    if rowid is not None and estimate > EXACT_UNTIL:
        ordered = _sampled(conn, table_sql, key_sql, rowid)
    else:
        step = max(1, math.ceil(estimate / (count * PER_RANGE)))
        rows = conn.execute(
            f"SELECT k FROM (SELECT {key_sql} AS k, row_number() OVER "
            f"(ORDER BY {key_sql}) AS n FROM {table_sql}) WHERE n % ? = 0 ORDER BY n",
            (step,),
        ).fetchall()
        ordered = [r[0] for r in rows]
    return quantile_bounds(ordered, count)


def _sampled(conn: sqlite3.Connection, table_sql: str, key_sql: str, rowid: str) -> list[Any]:
    low, high = conn.execute(f"SELECT min({rowid}), max({rowid}) FROM {table_sql}").fetchone()
    if low is None:
        return []
    rng = random.Random(0)
    picked = set()
    for _ in range(SAMPLES):
        row = conn.execute(
            f"SELECT {rowid} FROM {table_sql} WHERE {rowid} >= ? ORDER BY {rowid} LIMIT 1",
            (rng.randint(low, high),),
        ).fetchone()
        if row is not None:
            picked.add(row[0])
    rows = conn.execute(
        f"SELECT {key_sql} FROM {table_sql} WHERE {rowid} IN "
        f"(SELECT value FROM json_each(?)) ORDER BY {key_sql}",
        (json.dumps(sorted(picked)),),
    ).fetchall()
    return [r[0] for r in rows]
