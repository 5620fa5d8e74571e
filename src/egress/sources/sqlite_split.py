"""Boundaries of a split SQLite table: exact quantiles of its first key column.

The values are the column's raw stored values (what the cursor binds: the rowid, or the
key as stored), in SQLite's own order of the column (its collation). SQLite has no
table sample, and its row estimate is the largest rowid, which says nothing of where
the rows lie on a sparse or skewed key (sampling rowids between the smallest and the
largest would weigh each row by the gap before it). So the rows are counted, then the
key column is read once in key order and every k-th value kept: two passes over the
key (index-only where the key has its own index), measured in docs/jobs.md.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from typing import Any

from egress.domain.ranges import quantile_bounds

#: Values kept per range (more: closer to equal counts; a range is off by < 1/PER_RANGE).
PER_RANGE = 256


def split_points(conn: sqlite3.Connection, table_sql: str, key_sql: str,
                 count: int) -> list[Any]:
    """At most ``count - 1`` boundaries of ``key_sql`` in ``table_sql`` (both quoted by
    the source)."""
    (rows,) = conn.execute(f"SELECT count(*) FROM {table_sql}").fetchone()
    step = max(1, math.ceil(rows / (count * PER_RANGE)))
    ordered = [r[0] for r in conn.execute(
        f"SELECT k FROM (SELECT {key_sql} AS k, row_number() OVER "
        f"(ORDER BY {key_sql}) AS n FROM {table_sql}) WHERE n % ? = 0 ORDER BY n",
        (step,),
    )]
    return quantile_bounds(ordered, count)


def key_at_rows(conn: sqlite3.Connection, table_sql: str, key_sql: str,
                ends_of: Callable[[int], list[int]]) -> tuple[int, list[Any]]:
    """The table's row count and the raw values of ``key_sql`` at the 1-based row
    numbers ``ends_of(count)`` in key order (a stitched split: engine/stitch.py), exact:
    one count and one pass over the key in key order."""
    (rows,) = conn.execute(f"SELECT count(*) FROM {table_sql}").fetchone()
    ends = ends_of(int(rows))
    if not ends:
        return int(rows), []
    marks = ", ".join("?" for _ in ends)
    values = [r[0] for r in conn.execute(
        f"SELECT k FROM (SELECT {key_sql} AS k, row_number() OVER "
        f"(ORDER BY {key_sql}) AS n FROM {table_sql}) WHERE n IN ({marks}) ORDER BY n",
        ends,
    )]
    return int(rows), values
