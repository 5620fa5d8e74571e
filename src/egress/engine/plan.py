"""Planning a task: fix, once, everything that decides where parts and files end."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from functools import partial
from typing import Any

from egress.domain.checkpoint import TaskSpec
from egress.domain.predicate import Predicate
from egress.domain.ranges import KeyRange
from egress.engine.copied import check_server_csv
from egress.engine.naming import output_base_name
from egress.engine.selection import selected_schema
from egress.engine.sizes import SizeLimits, check_batch
from egress.exceptions import ConfigError
from egress.formats import get_compression, make_format, resolve_compression
from egress.sources.base import Source, TableInfo

DEFAULT_PART_SIZE = 8 * 1024 * 1024
SAMPLE_ROWS = 1000
MAX_PART_ROWS = 5_000_000


def format_options(
    fmt: str, source: Source, table: TableInfo, compression: str, options: dict[str, Any]
) -> dict[str, Any]:
    """The format's options, completed with what the source and table decide."""
    opts = dict(options)
    if "csv_dialect" in opts and fmt != "csv":
        raise ConfigError(f"csv_dialect applies to format csv only, not {fmt}")
    if fmt == "sql":
        opts.setdefault("dialect", source.dialect)
        opts.setdefault("table", table.name)
        opts.setdefault("primary_key", list(table.primary_key))
    if fmt == "parquet":
        from egress.formats.parquet import planned_options as parquet_layout

        opts.setdefault("compression", compression)
        for name, value in parquet_layout(opts["compression"]).items():
            opts.setdefault(name, value)
    if fmt == "csv":
        opts.setdefault("delimiter", ",")
    return opts


def plan_task(
    source: Source,
    table: TableInfo,
    *,
    format: str,
    compression: str | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    part_rows: int | None = None,
    max_file_size: int | None = None,
    min_part_bytes: int = 0,
    options: dict[str, Any] | None = None,
    columns: tuple[str, ...] | None = None,
    predicate: Predicate | None = None,
    limits: SizeLimits | None = None,
    key_range: KeyRange | None = None,
) -> TaskSpec:
    """A task for ``table`` (only ``columns`` and the rows matching ``predicate``, if
    given: checked by ``engine.selection``). Rows per part come from ``part_rows`` or
    from encoding a sample of the first rows, so that a part is about ``part_size`` bytes
    (the format's own part size if it has one: a Parquet row group). No ``compression``
    is the format's default; no ``max_file_size`` the format's default file size.
    ``key_range``: a range task of a split table with range files (its own numbered
    files, its rows sampled from its range; a stitched range is planned at create time
    as the whole table's task: engine/stitch.py)."""
    compression = resolve_compression(format, compression)
    opts = format_options(format, source, table, compression, options or {})
    read = (Predicate(predicate.conditions if predicate else (), key_range=key_range)
            if key_range is not None else predicate)
    if format == "parquet" and "dictionary_columns" not in opts:
        from egress.formats.parquet import DICTIONARY_SAMPLE, planned_dictionary

        # chosen once, from the task's first rows; every part considers only these
        opts["dictionary_columns"] = planned_dictionary(
            selected_schema(table, columns),
            _sample(source, table, DICTIONARY_SAMPLE, columns, read, limits or SizeLimits()))
    fmt = make_format(format, opts)
    if getattr(fmt, "server_rows", False):
        check_server_csv(source, table, selected_schema(table, columns).names, predicate)
    if part_rows is None:
        part_rows = _rows_for_size(source, table, fmt, fmt.part_bytes or part_size, columns,
                                   read, limits or SizeLimits())
        part_rows = min(part_rows, fmt.max_part_rows or MAX_PART_ROWS)
    max_file_size = max_file_size or fmt.file_size
    outer = "none" if fmt.inner_compression else compression
    return TaskSpec(
        table=table.name,
        format=format,
        compression=compression,
        part_rows=max(1, int(part_rows)),
        base_name=output_base_name(table.name, fmt, get_compression(outer),
                                   numbered=bool(max_file_size)),
        format_options=opts,
        min_part_bytes=min_part_bytes,
        max_file_size=max_file_size,
        columns=columns,
        predicate=predicate,
        key_range=key_range,
    )


def _rows_for_size(
    source: Source, table: TableInfo, fmt: Any, part_size: int,
    columns: tuple[str, ...] | None, predicate: Predicate | None, limits: SizeLimits,
) -> int:
    encoder = fmt.part_encoder(selected_schema(table, columns), 0)
    rows = 0
    for batch in _sample(source, table, SAMPLE_ROWS, columns, predicate, limits):
        encoder.add(batch)
        rows += batch.num_rows
    if rows == 0 or encoder.size == 0:
        return 10_000
    per_row = encoder.size / rows
    return int(min(MAX_PART_ROWS, max(1, part_size // per_row)))


def _sample(
    source: Source, table: TableInfo, rows: int, columns: tuple[str, ...] | None,
    predicate: Predicate | None, limits: SizeLimits,
) -> Iterator[Any]:
    """The task's first ``rows`` rows, of the selected columns."""
    names = list(columns) if columns is not None else table.column_names
    # a stream that cannot go back (a remote engine's result) samples what it has in hand
    sample = getattr(source, "sample", None)
    batches = sample(table, rows) if sample is not None else source.read(
        table, None, rows, predicate=predicate)
    for batch in batches:
        # the sample is encoded: an oversized value stops here as it would in a slice
        check_batch(batch, table.name, limits, partial(_row_key, batch, table.key_columns))
        yield batch.select(names)


def _row_key(batch: Any, key_columns: tuple[str, ...], row: int) -> tuple[Any, ...]:
    return tuple(batch.column(name)[row].as_py() for name in key_columns)


def fit_part_budget(
    spec: TaskSpec, info: TableInfo, part_size: int, max_parts: int | None
) -> TaskSpec:
    """Grow rows per part so that a file's estimated parts stay within the sink's limit
    (S3: 10,000 per object), with a fifth left for a low row estimate."""
    if max_parts is None:
        return spec
    budget = max_parts * 0.8
    parts = (info.row_estimate or 0) / spec.part_rows
    if spec.max_file_size is not None:
        parts = min(parts, spec.max_file_size / max(1, part_size))
    if parts <= budget:
        return spec
    return dataclasses.replace(spec, part_rows=math.ceil(spec.part_rows * parts / budget))
