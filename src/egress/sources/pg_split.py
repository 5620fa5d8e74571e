"""Boundaries of a split PostgreSQL table: quantiles of its first key column.

``percentile_disc`` over the column in its own order (its collation, as the keyset query
orders it) gives the values at 1/N, 2/N…, as text that the column's type reads back
exactly (the session settings of a read). Small tables are read whole (exact
quantiles); above :data:`EXACT_UNTIL` estimated rows a ``TABLESAMPLE SYSTEM`` of about
:data:`SAMPLE_ROWS` rows (whole pages: cheap on any size; ``REPEATABLE`` so that one
table gives one plan) stands for the table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

#: Up to this many estimated rows the quantiles are exact (the whole key column sorted).
EXACT_UNTIL = 1_000_000
#: About this many rows are sampled from a bigger table.
SAMPLE_ROWS = 200_000


def split_query(qualified: str, key: str, estimate: int | None) -> tuple[str, bool]:
    """The quantile query (parameter: the fractions as the text of a float8[]) and
    whether it samples. ``qualified`` and ``key`` are identifiers already quoted by the
    source."""
    sampled = bool(estimate and estimate > EXACT_UNTIL)
    sample = ""
    if sampled:
        percent = min(100.0, 100.0 * SAMPLE_ROWS / float(estimate or 1))
        # a float of ours, not user text
        sample = f" TABLESAMPLE SYSTEM ({float(round(percent, 6))!r}) REPEATABLE (0)"
    query = (f"SELECT (percentile_disc($1::text::float8[]) WITHIN GROUP (ORDER BY t.{key}))"
             f"::text[] FROM {qualified} AS t{sample}")
    return query, sampled


def _array_text(values: list[float] | list[int]) -> str:
    """Numbers of ours as the text of a PostgreSQL array (bound as one text parameter)."""
    return "{" + ",".join(repr(v) for v in values) + "}"


@contextlib.contextmanager
def _planning(conn: Any, settings: tuple[str, ...], snapshot: str | None) -> Iterator[Any]:
    """A cursor in the planning transaction: REPEATABLE READ (one view of the table for
    the count and the pass), in the export's snapshot if it has one (``snapshot``: the
    ``SET TRANSACTION SNAPSHOT`` statement, before any query), then the read settings
    (the text form the reads will cast back). Rolled back at the end: it reads only."""
    cur = conn.cursor()
    try:
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            if snapshot is not None:
                cur.execute(snapshot)
            for statement in settings:
                cur.execute(statement.replace("SET ", "SET LOCAL ", 1))
            yield cur
        finally:
            with contextlib.suppress(Exception):  # a lost connection: nothing to end
                cur.execute("ROLLBACK")
    finally:
        with contextlib.suppress(Exception):
            cur.close()


def split_points(conn: Any, settings: tuple[str, ...], qualified: str,
                 key: str, estimate: int | None, count: int,
                 snapshot: str | None = None) -> list[str]:
    """At most ``count - 1`` increasing boundaries (repeats collapsed) as text, read on
    the ADBC connection ``conn`` (autocommit)."""
    fractions = [k / count for k in range(1, count)]
    query, _ = split_query(qualified, key, estimate)
    with _planning(conn, settings, snapshot) as cur:
        cur.execute(query, parameters=(_array_text(fractions),))
        row = cur.fetchone()
    values = (row[0] if row else None) or []
    out: list[str] = []
    for value in values:
        if value is not None and (not out or value != out[-1]):
            out.append(value)
    return out


def key_at_rows(conn: Any, settings: tuple[str, ...], qualified: str,
                key: str, ends_of: Callable[[int], list[int]],
                snapshot: str | None = None) -> tuple[int, list[str]]:
    """The table's row count and the values of ``key`` (as text, as the cursor binds
    them) at the 1-based row numbers ``ends_of(count)`` in key order (a stitched split:
    engine/stitch.py), exact: one count and one pass over the key, in one snapshot."""
    with _planning(conn, settings, snapshot) as cur:
        cur.execute(f"SELECT count(*) FROM {qualified}")
        row = cur.fetchone()
        rows = int(row[0]) if row else 0
        ends = ends_of(rows)
        if not ends:
            return rows, []
        cur.execute(
            f"SELECT k::text FROM (SELECT t.{key} AS k, row_number() OVER "
            f"(ORDER BY t.{key}) AS n FROM {qualified} AS t) AS r "
            "WHERE n = ANY($1::text::int8[]) ORDER BY n",
            parameters=(_array_text([int(e) for e in ends]),))
        return rows, [r[0] for r in cur.fetchall()]
