"""Planning a split table: how many key ranges, and where they start and end.

Done once, when the export is created (the ranges are stored with its tasks and never
change, so that resumed range tasks never overlap or miss a row). The boundaries are
quantiles of the first key column that the source samples (``Source.split_points``:
exact on small tables, a sample on big ones), so that ranges hold similar row counts
even on a skewed key; repeated boundaries collapse into fewer ranges. Which sources
and exports can be split is decided here too, with errors that say what is allowed.
"""

from __future__ import annotations

from typing import Any

from egress.domain.ranges import KeyRange, range_count, ranges_from_bounds
from egress.exceptions import ConfigError
from egress.sources.base import Source, TableInfo

#: Source kinds whose tables can be split (their reads render a key range).
SPLIT_SOURCES = ("sqlite", "postgresql", "postgres", "duckdb", "mysql", "mariadb")
#: Who can be split, for error messages.
SPLIT_WHO = "SQLite, PostgreSQL, DuckDB and MySQL/MariaDB tables"


def check_split_export(split: int | str | None, *, kind: str, query: bool, remote: bool,
                       options: dict[str, Any]) -> None:
    """Refuse ``split`` where this version cannot honour it, saying what is allowed."""
    if split is None:
        return
    if query:
        raise ConfigError("split applies to tables, not to a query export: export the table, "
                          "or cut the query into several exports with WHERE clauses")
    if remote or kind not in SPLIT_SOURCES:
        raise ConfigError(f"split applies to {SPLIT_WHO}; this source is {kind} (export "
                          "its tables without split)")
    if options.get("csv_dialect") == "postgres":
        raise ConfigError("split does not apply to csv_dialect postgres (the server writes "
                          "the whole table); use the egress CSV dialect to split")


def plan_ranges(source: Source, table: TableInfo, split: int | str | None,
                split_rows: int) -> list[KeyRange] | None:
    """The key ranges of ``table`` (None: one task, not split). ``split``: N, ``"auto"``
    or None; ``split_rows``: rows per range for ``auto``."""
    count = range_count(split, table.row_estimate, split_rows)
    if count < 2:
        return None
    if not table.key_columns or table.opaque_key:
        raise ConfigError(f"table {table.name!r} has no key to split on")
    sample = getattr(source, "split_points", None)
    if sample is None:
        raise ConfigError(f"split applies to {SPLIT_WHO}; the source of table "
                          f"{table.name!r} cannot be split")
    bounds = sample(table, count)
    if not bounds:
        return None  # an empty table, or one key value: one task
    return ranges_from_bounds(table.key_columns[0], bounds)
