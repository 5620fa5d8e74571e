"""PostgreSQL source: the catalog through psycopg, rows through the ADBC PostgreSQL driver.

Tables are named as the search path shows them (``events``) or schema-qualified
(``audit.events``). Rows are read by keyset pagination over the primary key (or a
unique index over NOT NULL columns): ``WHERE (k1, k2) > (…) ORDER BY k1, k2 LIMIT n``,
each ``read`` in its own read-only REPEATABLE READ transaction. Cursor values are bound
as text and cast to the key column's own type, so uuid, timestamp and text keys compare
as PostgreSQL compares them. Type mapping: :mod:`egress.sources.pg_types`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import adbc_driver_manager
import adbc_driver_postgresql.dbapi as adbc_pg
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from egress.domain.instants import parse_instant
from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.exceptions import (
    DataError,
    NoUsableKeyError,
    PermissionDeniedError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.redact import redact_url, scrub, url_secrets
from egress.sources.base import Column, TableInfo
from egress.sources.pg_types import PgMapping, conform, list_check_sql, map_type
from egress.sources.pg_values import bound_type, filter_text, key_text
from egress.sources.predicate_sql import render_conditions

#: Batches handed to the engine hold at most this many rows (slices, no copies).
BATCH_ROWS = 65536
#: Tables up to this size get an exact count(*) as their row estimate.
EXACT_COUNT_BYTES = 64 * 1024 * 1024
#: Session settings that fix how PostgreSQL writes the values selected as text.
SESSION_SETTINGS = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, YMD'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
    "SET bytea_output = 'hex'",
    "SET application_name = 'egress'",
)
# SQLSTATEs (and classes) after which a retry later may succeed.
_TRANSIENT_CLASSES = ("08", "53", "57", "40")
_TRANSIENT_CODES = ("55P03", "55006")
#: A type's length/precision (``varchar(20)``, ``numeric(10,2)``, ``timestamp(3)``).
_FILTER_TYPMOD = re.compile(r"\(\s*\d+(?:\s*,\s*\d+)?\s*\)")

_TABLES_SQL = """
SELECT c.oid, n.nspname, c.relname, pg_table_is_visible(c.oid), c.relispartition
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'
ORDER BY n.nspname, c.relname
"""
# Each column with its type's name, kind and (for arrays) element type name.
_COLUMNS_SQL = """
SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attndims,
       a.atttypmod, t.typname, t.typtype, t.typbasetype, t.typtypmod, e.typname
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
# A domain's base type (a domain may be over another domain).
_TYPE_SQL = """
SELECT t.typname, t.typtype, t.typbasetype, t.typtypmod, e.typname
FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.oid = %s
"""
# Primary key first, then unique indexes: valid, not partial, no expressions.
_KEYS_SQL = """
SELECT i.indisprimary, c.relname, (i.indkey::int2[])[0:i.indnkeyatts - 1]
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL
ORDER BY i.indisprimary DESC, i.indnkeyatts, c.relname
"""
_PRIVILEGE_SQL = """
SELECT has_table_privilege(%(oid)s, 'SELECT') OR NOT EXISTS (
  SELECT 1 FROM pg_attribute a
  WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
    AND NOT has_column_privilege(%(oid)s, a.attnum, 'SELECT'))
"""
_SIZE_SQL = """
SELECT coalesce(sum(pg_relation_size(c.oid)), 0), coalesce(sum(greatest(c.reltuples, 0)), 0),
       bool_or(c.reltuples < 0)
FROM pg_partition_tree(%s) p JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf
"""


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def libpq_url(url: str) -> str:
    """The URL libpq understands: ``postgresql+psycopg://`` → ``postgresql://``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+", 1)[0].lower() not in ("postgresql", "postgres"):
        raise SourceError(
            f"not a PostgreSQL URL: {redact_url(url)!r} "
            "(expected postgresql://user:password@host:port/database)"
        )
    return "postgresql://" + rest


@dataclass(frozen=True)
class _Plan:
    """What ``read`` needs to know about a described table."""

    qualified: str
    mappings: tuple[PgMapping, ...]
    key_types: tuple[str, ...]


@dataclass(frozen=True)
class _Relation:
    oid: int
    schema: str
    name: str


class PostgresSource:
    dialect = "postgresql"
    #: Write the cursor into a table's keyset query (no parameters: a COPY stream).
    inline_cursor = True

    def __init__(self, url: str) -> None:
        self._url = libpq_url(url)
        self._secrets = url_secrets(self._url)
        self._catalog: psycopg.Connection[Any] | None = None
        self._conn: Any = None
        #: Marks the read() whose transaction is open on the ADBC connection.
        self._reader: object | None = None
        self._plans: dict[str, _Plan] = {}
        self._catalog_conn()
        try:
            self._adbc_conn()
        except SourceError:
            self.close()
            raise

    # --- connections ------------------------------------------------------------------

    def _scrub(self, message: str) -> str:
        return scrub(message, self._secrets)

    def _unavailable(self, exc: Exception) -> SourceUnavailableError:
        first = self._scrub(str(exc)).strip().splitlines()[0] if str(exc).strip() else ""
        return SourceUnavailableError(
            f"cannot reach PostgreSQL at {redact_url(self._url)}: {first or type(exc).__name__}"
        )

    def _catalog_conn(self) -> psycopg.Connection[Any]:
        if self._catalog is None or self._catalog.closed or self._catalog.broken:
            try:
                self._catalog = psycopg.connect(self._url, autocommit=True)
            except psycopg.Error as exc:
                raise self._unavailable(exc) from None
        return self._catalog

    def _adbc_conn(self) -> Any:
        if self._conn is None:
            try:
                conn = adbc_pg.connect(self._url, autocommit=True)
            except adbc_driver_manager.Error as exc:
                raise self._unavailable(exc) from None
            try:
                with contextlib.closing(conn.cursor()) as cur:
                    for statement in SESSION_SETTINGS:
                        cur.execute(statement)
            except adbc_driver_manager.Error as exc:
                conn.close()
                raise self._unavailable(exc) from None
            self._conn = conn
        return self._conn

    def _drop_adbc(self) -> None:
        conn, self._conn, self._reader = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        self._drop_adbc()
        if self._catalog is not None:
            self._catalog.close()

    def _fetch(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        try:
            return self._catalog_conn().execute(query, params).fetchall()
        except psycopg.Error as exc:
            raise self._translate(exc, getattr(exc, "sqlstate", None), None) from None

    # --- catalog ----------------------------------------------------------------------

    def _relations(self) -> tuple[dict[str, _Relation], list[str]]:
        """Every name a table can be asked by, and the names ``tables()`` lists."""
        names: dict[str, _Relation] = {}
        listed: list[str] = []
        for oid, schema, rel, visible, is_partition in self._fetch(_TABLES_SQL):
            relation = _Relation(oid, schema, rel)
            qualified = f"{schema}.{rel}"
            names.setdefault(qualified, relation)
            if visible:
                names[rel] = relation
            if not is_partition:
                listed.append(rel if visible else qualified)
        return names, sorted(set(listed))

    def tables(self) -> list[str]:
        return self._relations()[1]

    def describe(self, table: str) -> TableInfo:
        names, listed = self._relations()
        relation = names.get(table)
        if relation is None:
            raise TableNotFoundError(table, listed)
        (allowed,) = self._fetch(_PRIVILEGE_SQL, {"oid": relation.oid})[0]
        if not allowed:
            raise PermissionDeniedError(
                f"permission denied: the PostgreSQL user may not SELECT from table {table!r}; "
                f"grant it with GRANT SELECT ON {quote_ident(relation.schema)}."
                f"{quote_ident(relation.name)} TO <user>"
            )
        columns, mappings, by_attnum, types = [], [], {}, {}
        for (attnum, name, declared, notnull, ndims, typmod, *pg_type) in self._fetch(
            _COLUMNS_SQL, (relation.oid,)
        ):
            typname, element, typmod = self._base_type(pg_type, typmod)
            mapping = map_type(typname, typmod, element, ndims)
            mappings.append(mapping)
            columns.append(Column(
                name=name, source_type=declared, arrow_type=mapping.arrow_type,
                nullable=not notnull, logical_type=mapping.logical_type,
            ))
            by_attnum[attnum] = (name, bool(notnull), mapping)
            types[name] = declared
        primary_key, key = self._choose_key(table, relation.oid, by_attnum)
        self._plans[table] = _Plan(
            qualified=f"{quote_ident(relation.schema)}.{quote_ident(relation.name)}",
            mappings=tuple(mappings),
            key_types=tuple(types[k] for k in key),
        )
        return TableInfo(
            name=table,
            columns=tuple(columns),
            key_columns=key,
            row_estimate=self._estimate(relation),
            primary_key=primary_key,
        )

    def _base_type(self, pg_type: list[Any], typmod: int) -> tuple[str, str | None, int]:
        """(typname, element typname, typmod) of a column's type, through any domains."""
        for _ in range(32):  # domains over domains; PostgreSQL forbids cycles
            typname, typtype, base, base_mod, element = pg_type
            if typtype != "d":
                return typname, element, typmod
            typmod = base_mod
            pg_type = list(self._fetch(_TYPE_SQL, (base,))[0])
        return "text", None, -1

    def _choose_key(
        self, table: str, oid: int, by_attnum: dict[int, tuple[str, bool, PgMapping]]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(primary key, key columns): the primary key, else the narrowest unique index
        whose columns are all NOT NULL."""
        primary: tuple[str, ...] = ()
        for is_primary, _index, attnums in self._fetch(_KEYS_SQL, (oid,)):
            cols = [by_attnum.get(a) for a in attnums]
            names = tuple(c[0] for c in cols if c is not None)
            if is_primary:
                primary = names
            if None in cols or not all(c[1] for c in cols if c is not None):
                continue
            if any(pa.types.is_list(c[2].arrow_type) for c in cols if c is not None):
                continue  # array keys cannot be a cursor value
            return primary, names
        raise NoUsableKeyError(
            f"table {table!r} has no primary key and no unique index over NOT NULL columns, "
            "so it cannot be read in key order (egress never pages with OFFSET); "
            "add a PRIMARY KEY, or a UNIQUE index whose columns are all NOT NULL"
        )

    def _estimate(self, relation: _Relation) -> int | None:
        size, reltuples, never_analyzed = self._fetch(_SIZE_SQL, (relation.oid,))[0]
        if size <= EXACT_COUNT_BYTES:
            query = sql.SQL("SELECT count(*) FROM {}.{}").format(
                sql.Identifier(relation.schema), sql.Identifier(relation.name)
            )
            return int(self._fetch(query)[0][0])
        return None if never_analyzed else int(reltuples)

    # --- rows -------------------------------------------------------------------------

    def _literal(self, text: str) -> str:
        """``text`` as a quoted SQL string literal, escaped as the server expects."""
        return sql.Literal(text).as_string(self._catalog_conn())

    def _query(
        self, table: TableInfo, plan: _Plan, after: Key | None, limit: int,
        predicate: Predicate | None = None, params: list[object] | None = None,
        literal: Callable[[str], str] | None = None,
    ) -> str:
        """The keyset query. Its parameters: the cursor's values, then the filter values
        (appended to ``params``), then the LIMIT. With ``literal`` (which quotes a text
        as an SQL string literal), the cursor's values and the LIMIT are written into the
        query instead and only the filter values are parameters."""
        def col(name: str) -> str:
            # qualified, so that ORDER BY never resolves to a selected ``col::text``
            return "t." + quote_ident(name)

        selects = [
            m.select.format(c=col(c.name)) + " AS " + quote_ident(c.name)
            for c, m in zip(table.columns, plan.mappings, strict=True)
        ]
        selects += [
            list_check_sql(col(c.name)) for c, m in zip(table.columns, plan.mappings, strict=True)
            if m.list_check
        ]
        keys = [col(k) for k in table.key_columns]
        conditions = []
        if after is not None and literal is not None:
            casts = [f"CAST({literal(key_text(v))} AS {t})"
                     for v, t in zip(after, plan.key_types, strict=True)]
        elif after is not None:
            casts = [f"CAST(${i}::text AS {t})" for i, t in enumerate(plan.key_types, 1)]
        if after is not None:
            if len(keys) == 1:
                conditions.append(f"{keys[0]} > {casts[0]}")
            else:
                conditions.append(f"({', '.join(keys)}) > ({', '.join(casts)})")
        bound = params if params is not None else []
        first = 1 if literal is not None else len(after or ()) + 1
        types = {c.name: _FILTER_TYPMOD.sub("", c.source_type) for c in table.columns}

        kinds = {c.name: bound_type(c.arrow_type) for c in table.columns}

        def bind(column: str, value: object) -> str:
            kind = kinds[column]
            if kind == "timestamptz":
                # a real instant (a value without an offset is UTC), converted to the
                # column's type in the session's time zone, UTC: never text, whose
                # offset a ``timestamp`` input would ignore
                bound.append(parse_instant(str(value)))
            elif kind == "date":
                bound.append(dt.date.fromisoformat(str(value)))
            else:
                bound.append(filter_text(value))
            # the column's own type (without length/precision, which would round or cut)
            return f"CAST(${first + len(bound) - 1}::{kind} AS {types[column]})"

        conditions += render_conditions(predicate, col, bind)
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        limit_sql = str(int(limit)) if literal is not None else f"${first + len(bound)}"
        return (
            f"SELECT {', '.join(selects)} FROM {plan.qualified} AS t{where} "
            f"ORDER BY {', '.join(keys)} LIMIT {limit_sql}"
        )

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        plan = self._plans.get(table.name)
        if plan is None:
            self.describe(table.name)
            plan = self._plans[table.name]
        filter_values: list[object] = []
        # Without parameters the driver reads the result as a binary COPY stream, about
        # three times faster than a prepared statement's result (PQexecParams). Only the
        # cursor is then written into the query, as literals quoted by psycopg: it comes
        # from the table itself; user values (filters) stay bound parameters.
        literal = self._literal if predicate is None and self.inline_cursor else None
        query = self._query(table, plan, after, limit, predicate, filter_values, literal)
        params: tuple[object, ...] | None = (
            None if literal is not None
            else (*(key_text(v) for v in (after or ())), *filter_values, int(limit))
        )
        checks = [c for c, m in zip(table.columns, plan.mappings, strict=True) if m.list_check]
        schema = table.schema
        if self._reader is not None:
            self._end_transaction()  # a reader left open must not lend us its snapshot
        token = object()
        cur = self._adbc_conn().cursor()
        try:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._reader = token
            cur.execute(query, parameters=params)
            reader = cur.fetch_record_batch()
            for batch in reader:
                if batch.num_rows == 0:
                    continue
                for offset, column in enumerate(checks):
                    if pc.any(batch.column(len(schema) + offset)).as_py():
                        raise _shape_error(column)
                arrays = [
                    conform(batch.column(i), field, table.columns[i].source_type)
                    for i, field in enumerate(schema)
                ]
                out = pa.RecordBatch.from_arrays(arrays, schema=schema)
                for start in range(0, out.num_rows, BATCH_ROWS):
                    yield out.slice(start, BATCH_ROWS)
        except adbc_driver_manager.Error as exc:
            error = self._translate(exc, getattr(exc, "sqlstate", None), table.name)
            if isinstance(error, SourceUnavailableError):
                self._drop_adbc()
            raise error from None
        finally:
            with contextlib.suppress(adbc_driver_manager.Error):
                cur.close()
            if self._reader is token:
                self._end_transaction()

    def _end_transaction(self) -> None:
        self._reader = None
        if self._conn is None:
            return
        try:
            cur = self._conn.cursor()
            cur.execute("ROLLBACK")  # read only: nothing to commit
            cur.close()
        except adbc_driver_manager.Error:
            self._drop_adbc()

    def _translate(self, exc: Exception, sqlstate: str | None, table: str | None) -> SourceError:
        # the server's message line, without the driver's prefixes and the query text
        lines = self._scrub(str(exc)).strip().splitlines() or [type(exc).__name__]
        detail = next((ln for ln in lines if "ERROR:" in ln or "FATAL:" in ln), lines[0])
        detail = detail.split("ERROR:", 1)[-1].split("FATAL:", 1)[-1].strip()
        what = f"table {table!r}" if table else "the PostgreSQL catalog"
        if sqlstate == "42501":
            return PermissionDeniedError(f"permission denied reading {what}: {detail}")
        if sqlstate == "42P01" and table:
            return TableNotFoundError(table, self._relations()[1])
        lost = sqlstate is None and isinstance(
            exc, adbc_driver_manager.OperationalError | psycopg.OperationalError
        )
        if lost or (sqlstate or "").startswith(_TRANSIENT_CLASSES) or sqlstate in _TRANSIENT_CODES:
            return self._unavailable(exc)
        if sqlstate and sqlstate.startswith("22"):
            return DataError(f"cannot read {what}: {detail}")
        return SourceError(f"cannot read {what}: {detail} (SQLSTATE {sqlstate or 'unknown'})")


def _shape_error(column: Column) -> DataError:
    return DataError(
        f"column {column.name!r} ({column.source_type}) holds an array that is "
        "multi-dimensional or does not start at index 1, which an Arrow list cannot hold; "
        "declare the column with its dimensions (e.g. integer[][]) so egress exports it as text"
    )
