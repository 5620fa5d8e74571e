"""Boundaries of a split PostgreSQL table: quantiles of its first key column.

``percentile_disc`` over the column in its own order (its collation, as the keyset query
orders it) gives the values at 1/N, 2/N…, as text that the column's type reads back
exactly (the session settings of a read). Small tables are read whole (exact
quantiles); above :data:`EXACT_UNTIL` estimated rows a ``TABLESAMPLE SYSTEM`` of about
:data:`SAMPLE_ROWS` rows (whole pages: cheap on any size; ``REPEATABLE`` so that one
table gives one plan) stands for the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

#: Up to this many estimated rows the quantiles are exact (the whole key column sorted).
EXACT_UNTIL = 1_000_000
#: About this many rows are sampled from a bigger table.
SAMPLE_ROWS = 200_000


def split_query(qualified: str, key: str, estimate: int | None) -> tuple[sql.Composed, bool]:
    """The quantile query (parameter: the fractions as float8[]) and whether it samples.
    ``qualified`` and ``key`` are identifiers already quoted by the source."""
    sampled = bool(estimate and estimate > EXACT_UNTIL)
    sample: sql.Composable = sql.SQL("")
    if sampled:
        percent = min(100.0, 100.0 * SAMPLE_ROWS / float(estimate or 1))
        # a float of ours, not user text
        sample = sql.SQL(" TABLESAMPLE SYSTEM ({}) REPEATABLE (0)").format(
            sql.Literal(round(percent, 6)))
    query = sql.SQL(
        "SELECT (percentile_disc(%s::float8[]) WITHIN GROUP (ORDER BY t.{key}))::text[] "
        "FROM {table} AS t{sample}"
    ).format(key=sql.SQL(key), table=sql.SQL(qualified), sample=sample)
    return query, sampled


def _begin(cur: Any, settings: tuple[str, ...], snapshot: str | None) -> None:
    """The planning transaction's start: REPEATABLE READ (one view of the table for the
    count and the pass), in the export's snapshot if it has one (``snapshot``: the
    ``SET TRANSACTION SNAPSHOT`` statement, before any query), then the read settings
    (the text form the reads will cast back)."""
    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    if snapshot is not None:
        cur.execute(snapshot)
    for statement in settings:
        cur.execute(statement.replace("SET ", "SET LOCAL ", 1))


def split_points(conn: psycopg.Connection[Any], settings: tuple[str, ...], qualified: str,
                 key: str, estimate: int | None, count: int,
                 snapshot: str | None = None) -> list[str]:
    """At most ``count - 1`` increasing boundaries (repeats collapsed) as text."""
    fractions = [k / count for k in range(1, count)]
    query, _ = split_query(qualified, key, estimate)
    with conn.transaction(), conn.cursor() as cur:
        _begin(cur, settings, snapshot)
        cur.execute(query, (fractions,))
        row = cur.fetchone()
    values = (row[0] if row else None) or []
    out: list[str] = []
    for value in values:
        if value is not None and (not out or value != out[-1]):
            out.append(value)
    return out


def key_at_rows(conn: psycopg.Connection[Any], settings: tuple[str, ...], qualified: str,
                key: str, ends_of: Callable[[int], list[int]],
                snapshot: str | None = None) -> tuple[int, list[str]]:
    """The table's row count and the values of ``key`` (as text, as the cursor binds
    them) at the 1-based row numbers ``ends_of(count)`` in key order (a stitched split:
    engine/stitch.py), exact: one count and one pass over the key, in one snapshot."""
    with conn.transaction(), conn.cursor() as cur:
        _begin(cur, settings, snapshot)
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(qualified)))
        row = cur.fetchone()
        rows = int(row[0]) if row else 0
        ends = ends_of(rows)
        if not ends:
            return rows, []
        cur.execute(sql.SQL(
            "SELECT k::text FROM (SELECT t.{key} AS k, row_number() OVER "
            "(ORDER BY t.{key}) AS n FROM {table} AS t) AS r WHERE n = ANY(%s) ORDER BY n"
        ).format(key=sql.SQL(key), table=sql.SQL(qualified)), (ends,))
        return rows, [r[0] for r in cur.fetchall()]
