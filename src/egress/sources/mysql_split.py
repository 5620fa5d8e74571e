"""Boundaries of a split MySQL / MariaDB table: exact quantiles of its first key column.

MySQL and MariaDB have no ``percentile_disc`` aggregate on every version, and InnoDB's
row estimate says nothing of where rows lie on a skewed key, so the pass is exact, like
SQLite's: the rows are counted, then the key column is read once in key order and every
k-th value kept (``ROW_NUMBER()``; window functions: MariaDB 10.2, MySQL 8.0).

The order is the server's order of the column — its collation for text, the one the
keyset reads use (``ORDER BY`` the column itself, and a bound value compares by the
column's collation). Two values can be equal in that collation and still differ as
Python strings (``'a'`` and ``'A'`` in a case-insensitive collation, ``'a'`` and
``'a '`` where trailing spaces pad; possible on the first column of a composite key), so
repeats are collapsed by the server's ``DENSE_RANK()`` over the same order, not by
Python's ``==``: the boundaries are strictly increasing in the column's collation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from egress.domain.ranges import quantile_bounds

#: Values kept per range (more: closer to equal counts; a range is off by < 1/PER_RANGE).
PER_RANGE = 256


def sample_step(rows: int, count: int) -> int:
    """Keep every ``step``-th key of ``rows``: about PER_RANGE values per range."""
    return max(1, math.ceil(rows / (max(1, count) * PER_RANGE)))


def ranked_query(table_sql: str, key_sql: str, select_sql: str) -> str:
    """Every ``%s``-th value of the first key column in key order, with its dense rank in
    that order (PyMySQL placeholder: the step). ``table_sql`` is the quoted table,
    ``key_sql`` the column as ``t.<quoted>`` and ``select_sql`` how the reads select it."""
    return (f"SELECT x.k, x.d FROM (SELECT {select_sql} AS k, "
            f"ROW_NUMBER() OVER (ORDER BY {key_sql}) AS n, "
            f"DENSE_RANK() OVER (ORDER BY {key_sql}) AS d "
            f"FROM {table_sql} AS t) AS x WHERE MOD(x.n, %s) = 0 ORDER BY x.n")


def bounds_from_ranked(ranked: Sequence[tuple[Any, int]], count: int) -> list[Any]:
    """At most ``count - 1`` boundaries from ``(value, dense rank)`` pairs in key order:
    the quantiles of the ranks (repeated ranks collapsed), each given as the value that
    holds that rank."""
    ranks = [int(rank) for _, rank in ranked]
    value_of: dict[int, Any] = {}
    for value, rank in ranked:
        value_of.setdefault(int(rank), value)
    return [value_of[rank] for rank in quantile_bounds(ranks, count)]
