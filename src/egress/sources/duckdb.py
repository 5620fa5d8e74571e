"""DuckDB source: a database file opened read-only, rows through DuckDB's Arrow interface.

URL ``duckdb:///relative/path.duckdb`` or ``duckdb:////absolute/path.duckdb``. The file
is opened with ``read_only=True``: egress never writes it, and while it is open no
process can open it for writing (DuckDB's file lock). The catalog comes from
``duckdb_tables()``, ``duckdb_columns()`` and ``duckdb_constraints()``; tables of the
``main`` schema are named as they are (``events``), others with their schema
(``audit.events``). Names are checked against that catalog and quoted; every value
(cursor, filters, LIMIT) is a bound parameter.

Rows are read by keyset pagination over the primary key: ``WHERE (k1, k2) > (CAST(? AS
<k1's type>), …) ORDER BY k1, k2 LIMIT ?``, each page its own statement (its own
snapshot). A table without a primary key is read in ``rowid`` order: DuckDB's row ids
do not change while the file is not written, and egress only reads it (a writer that
deletes rows between two slices of an export may renumber them; docs/formats.md).
Type mapping: :mod:`egress.sources.duckdb_types`.

The ``duckdb`` package is an optional extra (``pip install 'egress[duckdb]'``); without
it, opening a ``duckdb://`` source is a ConfigError that says so.
"""

from __future__ import annotations

import contextlib
import decimal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from egress.domain.keys import Key
from egress.domain.predicate import Predicate, Scalar
from egress.exceptions import (
    ConfigError,
    DataError,
    NoUsableKeyError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources.base import Column, TableInfo
from egress.sources.duckdb_types import DuckMapping, conform, key_param, map_type
from egress.sources.predicate_sql import render_conditions
from egress.sources.timestamps import instant_text

try:
    import duckdb
except ImportError as exc:  # pragma: no cover - the extra is installed in development
    raise ConfigError(
        "a duckdb:// source needs the duckdb package: install egress with the duckdb "
        "extra (pip install 'egress[duckdb]')"
    ) from exc

#: Hidden column carrying the rowid of a table without a primary key.
ROWID = "__egress_rowid"
#: Prefix of the hidden columns carrying a key column's cursor (duckdb_types.py).
RAW_KEY = "__egress_key_"
BATCH_ROWS = 65536
_TABLES_SQL = (
    "SELECT schema_name, table_name, estimated_size FROM duckdb_tables() "
    "WHERE database_name = current_database() AND NOT internal AND NOT temporary "
    "ORDER BY schema_name, table_name"
)
_COLUMNS_SQL = (
    "SELECT column_name, data_type, is_nullable FROM duckdb_columns() "
    "WHERE database_name = current_database() AND schema_name = ? AND table_name = ? "
    "ORDER BY column_index"
)
_PRIMARY_KEY_SQL = (
    "SELECT constraint_column_names FROM duckdb_constraints() "
    "WHERE database_name = current_database() AND schema_name = ? AND table_name = ? "
    "AND constraint_type = 'PRIMARY KEY'"
)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def path_from_url(url: str) -> Path:
    """``duckdb:///rel/path.duckdb`` → rel/path.duckdb; ``duckdb:////abs/x`` → /abs/x."""
    if not url.startswith("duckdb:///"):
        raise SourceError(f"not a DuckDB URL: {url!r} (expected duckdb:///path/to.duckdb)")
    return Path(url[len("duckdb:///"):])


@dataclass(frozen=True)
class _Relation:
    schema: str
    name: str
    estimate: int | None


@dataclass(frozen=True)
class _Plan:
    """How to read one described table."""

    qualified: str
    mappings: tuple[DuckMapping, ...]
    #: SQL of the hidden columns, in schema order after the output columns.
    hidden_sql: tuple[str, ...]
    #: Per key column: its SQL (ORDER BY, comparison) and the type its cursor is cast to.
    key_sql: tuple[str, ...]
    key_casts: tuple[str, ...]
    schema: pa.Schema


class DuckdbSource:
    dialect = "duckdb"

    def __init__(self, url: str) -> None:
        self.path = path_from_url(url)
        if not self.path.is_file():
            raise SourceUnavailableError(f"cannot open DuckDB database {self.path}: no such file")
        try:
            self._con = duckdb.connect(str(self.path), read_only=True)
        except duckdb.Error as exc:
            raise SourceUnavailableError(
                f"cannot open DuckDB database {self.path}: {_first_line(exc)}"
            ) from exc
        # the catalog connection is shared by the calling and the read-ahead thread
        self._lock = threading.Lock()
        self._plans: dict[str, _Plan] = {}

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def _fetch(self, query: str, params: list[object] | None = None) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._con.execute(query, params).fetchall()
        except duckdb.Error as exc:
            raise SourceError(f"cannot read the DuckDB catalog: {_first_line(exc)}") from exc

    # --- catalog ----------------------------------------------------------------------

    def _relations(self) -> tuple[dict[str, _Relation], list[str]]:
        """Every name a table can be asked by, and the names ``tables()`` lists."""
        names: dict[str, _Relation] = {}
        listed: list[str] = []
        for schema, name, estimate in self._fetch(_TABLES_SQL):
            relation = _Relation(schema, name, estimate)
            names[f"{schema}.{name}"] = relation
            shown = name if schema == "main" else f"{schema}.{name}"
            names.setdefault(shown, relation)
            listed.append(shown)
        return names, sorted(listed)

    def tables(self) -> list[str]:
        return self._relations()[1]

    def describe(self, table: str) -> TableInfo:
        names, listed = self._relations()
        relation = names.get(table)
        if relation is None:
            raise TableNotFoundError(table, listed)
        columns: list[Column] = []
        mappings: dict[str, DuckMapping] = {}
        declared: dict[str, str] = {}
        for name, data_type, nullable in self._fetch(
            _COLUMNS_SQL, [relation.schema, relation.name]
        ):
            mapping = mappings[name] = map_type(data_type)
            declared[name] = data_type
            columns.append(Column(name=name, source_type=data_type,
                                  arrow_type=mapping.arrow_type, nullable=bool(nullable),
                                  logical_type=mapping.logical_type))
        rows = self._fetch(_PRIMARY_KEY_SQL, [relation.schema, relation.name])
        primary_key = tuple(rows[0][0]) if rows else ()
        key_columns: list[str] = []
        key_sql: list[str] = []
        key_casts: list[str] = []
        hidden: list[tuple[pa.Field, str]] = []
        for i, name in enumerate(primary_key):
            m = mappings[name]
            if not m.keyable:
                raise NoUsableKeyError(
                    f"table {table!r}: primary key column {name!r} is of type "
                    f"{declared[name]}, which egress cannot page by; keys may be of "
                    "scalar types (numbers, text, dates, times, UUIDs, enums, blobs)"
                )
            column_sql = "t." + quote_ident(name)
            key_sql.append(m.key_sql.format(c=column_sql))
            key_casts.append(m.key_cast or declared[name])
            if m.key_select is None:
                key_columns.append(name)
            else:
                hidden_name = f"{RAW_KEY}{i}"
                key_columns.append(hidden_name)
                hidden.append((pa.field(hidden_name, m.key_arrow),
                               m.key_select.format(c=column_sql)))
        if not primary_key:
            if any(c.name.lower() == "rowid" for c in columns):
                raise NoUsableKeyError(
                    f"table {table!r} has no primary key, and its column named rowid hides "
                    "DuckDB's rowid; add a PRIMARY KEY (or rename the column) to export it"
                )
            key_columns, key_sql, key_casts = [ROWID], ["t.rowid"], ["BIGINT"]
            hidden.append((pa.field(ROWID, pa.int64()), "t.rowid"))
        schema = pa.schema([c.field() for c in columns] + [f for f, _ in hidden])
        self._plans[table] = _Plan(
            qualified=f"{quote_ident(relation.schema)}.{quote_ident(relation.name)}",
            mappings=tuple(mappings[c.name] for c in columns),
            hidden_sql=tuple(sql for _, sql in hidden),
            key_sql=tuple(key_sql), key_casts=tuple(key_casts), schema=schema,
        )
        return TableInfo(
            name=table, columns=tuple(columns), key_columns=tuple(key_columns),
            hidden_columns=tuple(f.name for f, _ in hidden),
            row_estimate=relation.estimate, primary_key=primary_key,
        )

    def _plan(self, table: TableInfo) -> _Plan:
        plan = self._plans.get(table.name)
        if plan is None:
            self.describe(table.name)
            plan = self._plans[table.name]
        return plan

    def split_points(self, table: TableInfo, count: int) -> list[str]:
        """Boundaries of ``count`` key ranges of ``table`` with about equal rows: exact
        quantiles of its first key column in DuckDB's order of it (``quantile_disc``:
        a columnar pass), as text that ``CAST(? AS <key type>)`` reads back exactly
        (engine/split.py)."""
        plan = self._plan(table)
        # fractions of ours (k/count), not user text
        fractions = ", ".join(repr(k / count) for k in range(1, count))
        query = (f"SELECT CAST(quantile_disc({plan.key_sql[0]}, [{fractions}]) AS VARCHAR[]) "
                 f"FROM {plan.qualified} AS t")
        try:
            with self._lock:
                row = self._con.execute(query).fetchone()
        except duckdb.Error as exc:
            raise _translate(exc, table) from exc
        out: list[str] = []
        for value in (row[0] if row else None) or []:
            if value is not None and (not out or value != out[-1]):
                out.append(value)
        return out

    def key_at_rows(self, table: TableInfo,
                    ends_of: Callable[[int], list[int]]) -> tuple[int, list[str]]:
        """Rows of ``table`` and the values of its first key column at the 1-based row
        numbers ``ends_of(rows)`` in key order, as text like ``split_points`` (a stitched
        split: engine/stitch.py): exact, one count and one pass over the key column."""
        plan = self._plan(table)
        key = plan.key_sql[0]
        try:
            with self._lock:
                found = self._con.execute(f"SELECT count(*) FROM {plan.qualified}").fetchone()
                rows = int(found[0]) if found else 0
                ends = ends_of(rows)
                if not ends:
                    return rows, []
                marks = ", ".join("?" for _ in ends)  # row numbers of ours, bound
                values = self._con.execute(
                    f"SELECT CAST(r.k AS VARCHAR) FROM (SELECT {key} AS k, row_number() OVER "
                    f"(ORDER BY {key}) AS n FROM {plan.qualified} AS t) AS r "
                    f"WHERE r.n IN ({marks}) ORDER BY r.n", ends).fetchall()
        except duckdb.Error as exc:
            raise _translate(exc, table) from exc
        return rows, [v for (v,) in values]

    # --- rows -------------------------------------------------------------------------

    def _query(self, table: TableInfo, plan: _Plan, after: Key | None,
               predicate: Predicate | None, params: list[object]) -> str:
        """The keyset query; appends its parameters but the LIMIT to ``params``."""
        selects = [
            m.select.format(c="t." + quote_ident(c.name)) + " AS " + quote_ident(c.name)
            for c, m in zip(table.columns, plan.mappings, strict=True)
        ]
        selects += [f"{sql} AS {quote_ident(f.name)}" for sql, f in
                    zip(plan.hidden_sql, list(plan.schema)[len(table.columns):], strict=True)]
        conditions = []
        if after is not None:
            casts = [f"CAST(? AS {t})" for t in plan.key_casts]
            if len(casts) == 1:
                conditions.append(f"{plan.key_sql[0]} > {casts[0]}")
            else:
                conditions.append(f"({', '.join(plan.key_sql)}) > ({', '.join(casts)})")
            params.extend(key_param(v) for v in after)
        bounds = predicate.key_range if predicate is not None else None
        if bounds is not None:  # a range of a split table: bound like the cursor
            if bounds.lo is not None:
                conditions.append(f"{plan.key_sql[0]} > CAST(? AS {plan.key_casts[0]})")
                params.append(key_param(bounds.lo))
            if bounds.hi is not None:
                conditions.append(f"{plan.key_sql[0]} <= CAST(? AS {plan.key_casts[0]})")
                params.append(key_param(bounds.hi))
        by_name = {c.name: c for c in table.columns}

        def column(name: str) -> str:
            col = by_name[name]
            sql = "t." + quote_ident(name)
            if pa.types.is_string(col.arrow_type) and col.source_type != "VARCHAR":
                return f"CAST({sql} AS VARCHAR)"  # text filters compare the exported text
            return sql

        def bind(name: str, value: Scalar) -> str:
            t = by_name[name].arrow_type
            if pa.types.is_timestamp(t) and isinstance(value, str):
                if t.tz:  # an explicit offset: the session's time zone plays no part
                    params.append(instant_text(value) + "+00:00")
                    return "CAST(? AS TIMESTAMPTZ)"
                params.append(instant_text(value))
                return "CAST(? AS TIMESTAMP)"
            if pa.types.is_date(t):
                params.append(value)
                return "CAST(? AS DATE)"
            if isinstance(value, str) and not pa.types.is_string(t):
                params.append(decimal.Decimal(value))  # a number given as text, exact
                return "?"
            params.append(value)
            return "?"

        conditions += render_conditions(predicate, column, bind, key_range_rendered=True)
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        return (f"SELECT {', '.join(selects)} FROM {plan.qualified} AS t{where} "
                f"ORDER BY {', '.join(plan.key_sql)} LIMIT ?")

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        plan = self._plan(table)
        params: list[object] = []
        query = self._query(table, plan, after, predicate, params)
        params.append(int(limit))
        with self._lock:
            cur = self._con.cursor()  # a connection of its own to the same database
        try:
            reader = cur.sql(query, params=params).to_arrow_reader(BATCH_ROWS)
            for batch in reader:
                if batch.num_rows == 0:
                    continue
                arrays = [
                    conform(batch.column(i), field, _source_type(table, i))
                    for i, field in enumerate(plan.schema)
                ]
                yield pa.RecordBatch.from_arrays(arrays, schema=plan.schema)
        except (duckdb.Error, OSError, pa.ArrowInvalid) as exc:
            raise _translate(exc, table) from exc
        finally:
            with contextlib.suppress(duckdb.Error):
                cur.close()


def _source_type(table: TableInfo, index: int) -> str:
    return table.columns[index].source_type if index < len(table.columns) else "key"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _translate(exc: BaseException, table: TableInfo) -> SourceError:
    message = _first_line(exc)
    if isinstance(exc, duckdb.IOException | OSError):
        return SourceUnavailableError(f"cannot read DuckDB table {table.name!r}: {message}")
    if isinstance(exc, duckdb.ConversionException | duckdb.OutOfRangeException):
        return DataError(f"cannot read DuckDB table {table.name!r}: {message}")
    return SourceError(f"cannot read DuckDB table {table.name!r}: {message}")
