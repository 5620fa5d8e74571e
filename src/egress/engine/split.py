"""Planning a split table: whether to split it, how many key ranges, and where they start
and end.

Done once, by the worker that first claims the table's task (``plan_split``; the ranges
are stored with the tasks in one fenced write and never change, so that resumed range
tasks never overlap or miss a row). Planning may read the whole key column (a stitched
split counts exact rows), so it is never done in the request that creates the export.
The boundaries are quantiles of the first key column that the source samples
(``Source.split_points``: exact on small tables, a sample on big ones), so that ranges
hold similar row counts even on a skewed key; repeated boundaries collapse into fewer
ranges. Which sources and exports can be split is decided here too, with errors that say
what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from egress.domain.checkpoint import TaskSpec
from egress.domain.ranges import KeyRange, range_count, ranges_from_bounds
from egress.engine.stitch import STITCH_SOURCES, STITCH_WHO, check_stitched, plan_stitched
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


@dataclass(frozen=True)
class SplitAsked:
    """How an export splits its tables: ``split`` (N or ``"auto"``) and ``layout``:
    ``stitched`` (one file, refused where it cannot be), ``files`` (each range its own
    files), ``auto`` (stitched where it applies, else files) or ``quiet`` (the default
    split nobody asked for: stitched where it applies, else not split, so that the
    output is always the bytes one task writes)."""

    split: int | str
    layout: str


def split_asked(options: dict[str, Any], kind: str, *, remote: bool = False,
                auto_split: bool = True) -> SplitAsked | None:
    """How an export with ``options`` on a ``kind`` source splits its tables (None: not
    at all). No ``split`` option: ``auto`` split, stitched only (``quiet``), where a
    stitched split can apply, unless ``auto_split`` (the setting) is off. A stitched
    split asked of a source that cannot have one is refused here."""
    if remote or "query" in options or options.get("csv_dialect") == "postgres":
        return None
    split = options.get("split")
    if split is False:
        return None
    if split is None:
        if not auto_split or kind not in STITCH_SOURCES or options.get("max_file_size"):
            return None
        return SplitAsked("auto", "quiet")
    given = options.get("split_files")
    if given is False and kind not in STITCH_SOURCES:
        raise ConfigError(f"a stitched split (split_files: false) applies to {STITCH_WHO}; "
                          "use split_files: true (each range its own files)")
    if given is not None:
        return SplitAsked(split, "files" if given else "stitched")
    if options.get("max_file_size") or kind not in STITCH_SOURCES:
        return SplitAsked(split, "files")
    return SplitAsked(split, "auto")


def check_splittable(table: TableInfo, asked: SplitAsked, split_rows: int, *,
                     filtered: bool) -> None:
    """Refuse at create time what planning would refuse later, from the catalog alone:
    a table to be split that has no key, or a stitched split it cannot have."""
    if asked.layout == "quiet" or range_count(asked.split, table.row_estimate, split_rows) < 2:
        return
    if not table.key_columns or table.opaque_key:
        raise ConfigError(f"table {table.name!r} has no key to split on")
    if asked.layout == "stitched":
        check_stitched(table, filtered=filtered)


#: A planned range: its keys, its spec (stitched; None: planned when claimed) and its
#: row count (stitched: exact when planned, counted from the boundaries; None: unknown).
PlannedRange = tuple[KeyRange, TaskSpec | None, int | None]


def plan_split(source: Source, table: TableInfo, spec: TaskSpec, asked: SplitAsked, *,
               split_rows: int, part_size: int, max_parts: int | None,
               ) -> list[PlannedRange] | None:
    """The ranges of ``table`` (None: one task). ``spec``: the whole table's plan as one
    task would make it, before the sink's part budget (``max_parts``). The default
    split (``quiet``) only stitches, and only where one task writes one file: the output
    is then the same whatever is split."""
    count = range_count(asked.split, table.row_estimate, split_rows)
    if count < 2:
        return None
    if asked.layout == "quiet" and spec.max_file_size:
        return None  # one task writes numbered files (a Parquet dataset): a stitch does not
    if asked.layout in ("stitched", "auto", "quiet"):
        def ranges_of(rows: int) -> int:  # auto: from the exact count, not the estimate
            return range_count(asked.split, rows, split_rows) if asked.split == "auto" else count

        try:
            stitched = plan_stitched(source, table, spec, ranges_of, part_size=part_size,
                                     max_parts=max_parts)
        except ConfigError:
            if asked.layout == "stitched":
                raise
            if asked.layout == "quiet":
                return None
        else:
            if stitched is None:
                return None
            specs, total = stitched
            starts = [s.stitch_rows_before or 0 for s in specs] + [total]
            return [(s.key_range, s, starts[i + 1] - starts[i])
                    for i, s in enumerate(specs) if s.key_range]
    ranges = plan_ranges(source, table, asked.split, split_rows)
    return [(r, None, None) for r in ranges] if ranges else None


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
