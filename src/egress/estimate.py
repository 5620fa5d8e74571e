"""Dry run of an export: rows, bytes and time, without creating anything.

Rows are the catalog's estimates (with filters: an upper bound). Bytes are extrapolated
from encoding and compressing a sample of each table's first rows in the requested
format. Time assumes ``api.estimate_rows_per_second``: a rough figure, not a promise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from egress.config import Settings
from egress.domain.predicate import Predicate
from egress.engine.plan import format_options
from egress.engine.selection import check_selection, selected_schema
from egress.exceptions import ConfigError
from egress.formats import get_compression, make_format, resolve_compression
from egress.manager import open_export_source
from egress.sources import source_kind
from egress.sources.base import Source, TableInfo
from egress.sources.query import Query
from egress.store.base import JobStore

SAMPLE_ROWS = 1000
#: Completed exports of the same format the measured throughput is taken from.
THROUGHPUT_SAMPLES = 20


@dataclass(frozen=True)
class TableEstimate:
    table: str
    rows: int | None
    bytes: int | None


@dataclass(frozen=True)
class Estimate:
    tables: tuple[TableEstimate, ...]
    rows: int | None
    bytes: int | None
    seconds: float | None
    #: The rows per second ``seconds`` assumes, and where that figure comes from.
    rows_per_second: float = 0.0
    rate_basis: Literal["measured", "default"] = "default"


def measured_rate(store: JobStore, settings: Settings, kind: str, format: str
                  ) -> float | None:
    """Rows per second of the recent completed exports from ``kind`` sources in
    ``format`` (total rows over total time, so that big exports weigh most)."""
    rows = seconds = 0.0
    taken = 0
    for source, n, spent in store.export_throughput(format, limit=5 * THROUGHPUT_SAMPLES):
        try:
            same_kind = source_kind(settings.source_url(source)) == kind
        except ConfigError:  # a source no longer configured
            continue
        if same_kind and n > 0 and spent > 0:
            rows, seconds, taken = rows + n, seconds + spent, taken + 1
            if taken == THROUGHPUT_SAMPLES:
                break
    return rows / seconds if seconds > 0 else None


def _sample_bytes_per_row(
    source: Source, info: TableInfo, fmt_name: str, compression: str,
    columns: tuple[str, ...] | None, predicate: Predicate | None,
) -> float | None:
    fmt = make_format(fmt_name, format_options(fmt_name, source, info, compression, {}))
    schema = selected_schema(info, columns)
    encoder = fmt.part_encoder(schema, 0)
    rows = 0
    for batch in source.read(info, None, SAMPLE_ROWS, predicate=predicate):
        encoder.add(batch.select(schema.names))
        rows += batch.num_rows
    if rows == 0:
        return None
    body = encoder.finish()
    if not fmt.inner_compression:
        body = get_compression(compression).compress(body)
    return len(body) / rows


def estimate_export(
    settings: Settings,
    source_name: str,
    tables: list[str] | None,
    *,
    all_tables: bool = False,
    format: str = "csv",
    compression: str | None = None,
    select: dict[str, Any] | None = None,
    query: Query | None = None,
    store: JobStore | None = None,
) -> Estimate:
    compression = resolve_compression(format, compression)
    source = open_export_source(settings, settings.source_url(source_name), query)
    try:
        if query is not None:
            # describing checks the query; rows are the planner's guess (PostgreSQL) or
            # unknown (SQLite); no sample: that would run the query
            info = source.describe(query.name)
            out = [TableEstimate(query.name, info.row_estimate, None)]
            names = []
        else:
            names = source.tables() if all_tables else list(dict.fromkeys(tables or []))
            if not names:
                raise ConfigError("name at least one table, or ask for all tables")
            out = []
        for name in names:
            info = source.describe(name)
            wanted = (select or {}).get(name) or {}
            columns, predicate = check_selection(info, wanted.get("columns"),
                                                 wanted.get("filters"))
            per_row = _sample_bytes_per_row(source, info, format, compression, columns,
                                            predicate)
            rows = info.row_estimate
            size = None if rows is None else int(rows * (per_row or 0.0))
            out.append(TableEstimate(name, rows, size))
    finally:
        source.close()
    total_rows = None if any(t.rows is None for t in out) else sum(t.rows or 0 for t in out)
    total_bytes = None if any(t.bytes is None for t in out) else sum(t.bytes or 0 for t in out)
    kind = source_kind(settings.source_url(source_name))
    measured = None if store is None else measured_rate(store, settings, kind, format)
    rate = measured or settings.api.estimate_rows_per_second
    seconds = None if total_rows is None or rate <= 0 else round(total_rows / rate, 1)
    return Estimate(tuple(out), total_rows, total_bytes, seconds, rate,
                    "measured" if measured else "default")
