"""The stitched split: a split table's ranges joined into the bytes one task would write.

A stitched split is planned once, by the worker that first claims the table's task
(``plan_stitched``, called from engine/split.py): one TaskSpec for the whole table, as a
single task would plan it, and range boundaries at exact row indexes that are multiples
of its ``part_rows``, counted from the table's first row. A part is made of chunks of
``part_rows`` rows, each its own gzip member, zstd frame or Parquet row group, so a
range whose first row is a multiple of ``part_rows`` encodes exactly the chunks the
single task encodes for those rows. Range *k* writes its chunks as a file of its own
under a hidden name (a *piece*, ``.egress/ranges/…``, completed like any file:
resumable, fenced, atomic), with no header unless it is the first, its encoders told the
row index it starts at (JSON's separators), and no footer. The export's finalize
(``stitch_results``) joins the pieces in key order and appends the footer, built from
every range's row-group metadata moved by the bytes before it (Parquet), under the final
name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import google_crc32c

from egress.domain.checkpoint import Checkpoint, FileRecord, TaskSpec
from egress.domain.crc import crc32c_concat
from egress.domain.ranges import KeyRange, ranges_from_bounds
from egress.engine.naming import file_name
from egress.engine.plan import fit_part_budget
from egress.engine.selection import selected_schema
from egress.exceptions import ConfigError, SinkError
from egress.formats import get_compression, make_format
from egress.formats.parquet_footer import moved
from egress.sources.base import Source, TableInfo

#: Sources whose tables a stitched split can cut at exact row indexes.
STITCH_SOURCES = ("sqlite", "postgresql", "postgres", "duckdb", "mysql", "mariadb")
STITCH_WHO = "SQLite, PostgreSQL, DuckDB and MySQL/MariaDB tables"


def check_stitched(table: TableInfo, *, filtered: bool) -> None:
    """Refuse a stitched split where exact row boundaries cannot be had (``filtered``:
    the export filters the table's rows)."""
    if len(table.key_columns) != 1 or table.opaque_key:
        raise ConfigError(
            f"table {table.name!r} has a composite key: a stitched split (one file) needs a "
            "one-column key; use split_files: true (each range its own files)")
    if filtered:
        raise ConfigError("filters and a stitched split (one file) do not go together yet; "
                          "use split_files: true (each range its own files)")


def chunk_bounds(rows: int, part_rows: int, count: int) -> list[int]:
    """Where ranges end, as 1-based row numbers: ``count`` ranges (fewer for a small
    table) of about equal whole numbers of ``part_rows`` chunks; the last range is open
    above, so its end is not listed."""
    chunks = -(-rows // part_rows)
    count = min(count, chunks)
    if count < 2:
        return []
    return [(k * chunks // count) * part_rows for k in range(1, count)]


def plan_stitched(source: Source, table: TableInfo, spec: TaskSpec,
                  count: int | Callable[[int], int], *, part_size: int = 0,
                  max_parts: int | None = None) -> tuple[list[TaskSpec], int] | None:
    """The specs of ``count`` stitched ranges of ``table`` and the table's exact row
    count when planned (None: too small to split),
    ``spec`` being the single task's plan before the sink's part budget (``max_parts``,
    fitted here to the exact row count the boundaries are counted from). ``count`` may
    be a function of that exact count (``split: auto``: a catalog's estimate can be far
    off, SQLite's largest rowid on a sparse key)."""
    ranges_of = count if callable(count) else lambda rows: count
    check_stitched(table, filtered=spec.predicate is not None)
    rows_at = getattr(source, "key_at_rows", None)
    if rows_at is None:
        raise ConfigError(f"a stitched split (one file) applies to {STITCH_WHO}; use "
                          "split_files: true (each range its own files)")
    fitted = [spec]

    def ends_of(rows: int) -> list[int]:
        fitted[0] = fit_part_budget(spec, dataclasses.replace(table, row_estimate=rows),
                                    part_size, max_parts)
        return chunk_bounds(rows, fitted[0].part_rows, ranges_of(rows))

    total, values = rows_at(table, ends_of)
    if not values:
        return None
    spec = fitted[0]
    ends = chunk_bounds(total, spec.part_rows, ranges_of(total))
    ranges: list[KeyRange] = ranges_from_bounds(table.key_columns[0], values)
    starts = [0, *ends]
    whole = dataclasses.replace(spec, max_file_size=None, key_range=None)
    fmt = make_format(spec.format, spec.format_options)
    outer = "none" if fmt.inner_compression else spec.compression
    name = file_name(whole, 1, fmt, get_compression(outer))
    return [dataclasses.replace(whole, key_range=r, stitch_rows_before=starts[r.index],
                                stitch_name=name) for r in ranges], total


def stitch_results(sink: Any, results: Sequence[Any]) -> list[Any]:
    """``results`` (engine.manifest.TableResult) with each stitched table's pieces
    joined into its final file: the first range's checkpoint lists that file, the
    others none. Idempotent (the sink's ``stitch_file`` is)."""
    out: list[Any] = []
    i = 0
    while i < len(results):
        r = results[i]
        if not r.spec.stitched:
            out.append(r)
            i += 1
            continue
        group = [r]
        while (i + len(group) < len(results)
               and results[i + len(group)].spec.stitch_name == r.spec.stitch_name):
            group.append(results[i + len(group)])
        i += len(group)
        out.extend(_stitch_table(sink, group))
    return out


def _stitch_table(sink: Any, group: list[Any]) -> list[Any]:
    group = sorted(group, key=lambda g: g.spec.key_range.index)
    spec: TaskSpec = group[0].spec
    pieces: list[FileRecord] = []
    for g in group:
        if len(g.checkpoint.files) != 1:
            raise SinkError(f"range {g.spec.key_range.label} of {spec.table!r} wrote "
                            f"{len(g.checkpoint.files)} files, expected one piece")
        pieces.append(g.checkpoint.files[0])
    fmt = make_format(spec.format, spec.format_options)
    compression = get_compression("none" if fmt.inner_compression else spec.compression)
    rows = sum(p.rows for p in pieces)
    metas: list[bytes] = []
    base = 0
    for p in pieces:
        metas += [moved(m, base) for m in p.metas] if base else list(p.metas)
        base += p.size
    footer = fmt.footer(selected_schema(group[0].table, spec.columns), rows, metas)
    tail = compression.compress(footer) if footer else b""
    size = base + len(tail)
    stitch = getattr(sink, "stitch_file", None)
    if stitch is None:
        raise SinkError(f"this destination cannot stitch the ranges of {spec.table!r}")
    sha256 = stitch(spec.stitch_name, [(p.name, p.size) for p in pieces], tail, size)
    with_rows = [p for p in pieces if p.rows]
    record = FileRecord(
        name=spec.stitch_name or "", rows=rows, size=size,
        crc32c=crc32c_concat([*((p.crc32c or 0, p.size) for p in pieces),
                              (google_crc32c.value(tail), len(tail))]),
        sha256=sha256, parts=sum(p.parts for p in pieces),
        first_key=with_rows[0].first_key if with_rows else None,
        last_key=with_rows[-1].last_key if with_rows else None,
    )
    out = []
    for k, g in enumerate(group):
        cp: Checkpoint = g.checkpoint
        cp = cp.evolve(files=(record,) if k == 0 else (),
                       bytes=cp.bytes + (len(tail) if k == len(group) - 1 else 0))
        out.append(dataclasses.replace(g, checkpoint=cp))
    return out
