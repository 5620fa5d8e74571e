"""Rendering a checked :class:`Predicate` as SQL conditions with bound parameters.

Each source passes how it names a column (quoted by its dialect) and how it binds a value
(a placeholder it numbers itself); no value is ever written into the SQL text.
"""

from __future__ import annotations

from collections.abc import Callable

from egress.domain.predicate import COMPARISONS, Predicate, Scalar
from egress.exceptions import ConfigError


def render_conditions(
    predicate: Predicate | None,
    column: Callable[[str], str],
    bind: Callable[[str, Scalar], str],
    *,
    key_range_rendered: bool = False,
) -> list[str]:
    """One SQL condition per condition of ``predicate`` (to be joined with AND).

    ``column(name)`` returns the column's SQL; ``bind(name, value)`` records a parameter
    and returns its placeholder. A source that reads split tables renders the key range
    itself, like its cursor, and says so with ``key_range_rendered``; any other source
    refuses a key range rather than read the whole table for each range."""
    if predicate is None:
        return []
    if predicate.key_range is not None and not key_range_rendered:
        raise ConfigError("this source cannot read a key range of a split table; "
                          "split applies to SQLite, PostgreSQL, DuckDB and MySQL/MariaDB "
                          "tables")
    out = []
    for c in predicate.conditions:
        col = column(c.column)
        if c.op == "is_null":
            out.append(f"{col} IS NULL")
        elif c.op == "not_null":
            out.append(f"{col} IS NOT NULL")
        elif c.op == "in" and isinstance(c.value, tuple):
            out.append(f"{col} IN ({', '.join(bind(c.column, v) for v in c.value)})")
        elif c.op in COMPARISONS and c.value is not None and not isinstance(c.value, tuple):
            out.append(f"{col} {COMPARISONS[c.op]} {bind(c.column, c.value)}")
        else:
            raise ConfigError(f"malformed filter condition {c.to_json()!r}")
    return out
