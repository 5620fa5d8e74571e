"""A free-form query on a PostgreSQL database (see :mod:`egress.sources.query`).

Read-only, three ways: the query only ever runs as a subquery (``SELECT … FROM (<query>)
AS t``: no INSERT/UPDATE/DELETE, no data-modifying WITH, which PostgreSQL allows only at
the top level), in a ``READ ONLY`` transaction (a function that writes, ``nextval``,
``pg_advisory_lock``… fail with SQLSTATE 25006), sent with the extended protocol, which
refuses a second statement. Every statement carries ``statement_timeout``. For defence
in depth, give the source a role that may only SELECT.

The result is described with ``LIMIT 0`` (names, type OIDs and modifiers) and typed with
the table mapping of :mod:`egress.sources.pg_types`; rows are read by the table reader
of :class:`~egress.sources.postgres.PostgresSource` over ``(<query>)`` instead of a
table, so conversions are exactly those of a table export.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa

from egress.domain.keys import Key
from egress.exceptions import (
    ConfigError,
    DataError,
    EgressError,
    SourceError,
    SourceUnavailableError,
)
from egress.sources.base import Column, TableInfo
from egress.sources.pg_keyset import ReadPlan
from egress.sources.pg_types import map_type
from egress.sources.postgres import PostgresSource
from egress.sources.query import (
    Query,
    QueryCatalog,
    check_result_columns,
    timeout_error,
)

_TYPES_SQL = """
SELECT t.oid, t.typname, t.typtype, t.typbasetype, t.typtypmod, e.typname
FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.oid = ANY(%s)
"""
_DECLARED_SQL = """
SELECT format_type(o, nullif(m, -1)) FROM unnest(%s::oid[], %s::int[]) WITH ORDINALITY AS u(o, m, i)
ORDER BY i
"""


class PostgresQuerySource(QueryCatalog, PostgresSource):
    #: The caller's SQL goes only through the extended protocol, which refuses a second
    #: statement: the cursor stays a bound parameter.
    inline_cursor = False

    def __init__(self, url: str, query: Query, timeout: float) -> None:
        self.query, self.timeout = query, timeout
        self._timeout_ms = max(1, round(timeout * 1000))
        self._info: TableInfo | None = None
        #: psycopg, for what ADBC does not tell of a result: its type OIDs and modifiers
        self._describer: psycopg.Connection[Any] | None = None
        super().__init__(url)

    def _describe_conn(self) -> psycopg.Connection[Any]:
        conn = self._describer
        if conn is None or conn.closed or conn.broken:
            try:
                self._describer = conn = psycopg.connect(self._url, autocommit=True)
            except psycopg.Error as exc:
                raise self._unavailable(exc) from None
        return conn

    def close(self) -> None:
        super().close()
        conn, self._describer = self._describer, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _read_session_settings(self) -> tuple[str, ...]:
        # every page's statement is cancelled past the timeout (an int of ours)
        return (*super()._read_session_settings(),
                f"SET statement_timeout = {int(self._timeout_ms)}")

    def _describe(self) -> TableInfo:
        q = self.query
        wrapped = f"(\n{q.sql}\n)"
        conn = self._describe_conn()
        try:
            with conn.transaction():
                conn.execute("SET TRANSACTION READ ONLY")
                conn.execute(f"SET LOCAL statement_timeout = {self._timeout_ms}")
                # prepared: the extended protocol refuses a second statement (and $n)
                cur = conn.execute(f"SELECT * FROM {wrapped} AS q LIMIT 0",
                                   prepare=True)
                desc = cur.description or []
                result = cur.pgresult
                assert result is not None
                oids = [d.type_code for d in desc]
                mods = [result.fmod(i) for i in range(len(desc))]
                plan = conn.execute(
                    f"EXPLAIN (FORMAT JSON) SELECT * FROM {wrapped} AS q", prepare=True
                ).fetchone()
                types = {row[0]: list(row[1:]) for row in conn.execute(
                    _TYPES_SQL, (oids,)).fetchall()}
                declared = [r[0] for r in conn.execute(_DECLARED_SQL, (oids, mods)).fetchall()]
        except psycopg.Error as exc:
            raise self._query_error(exc, getattr(exc, "sqlstate", None), describing=True) from None
        names = [d.name for d in desc]
        check_result_columns(names, q, self.dialect)
        columns, mappings = [], []
        for name, oid, mod, decl in zip(names, oids, mods, declared, strict=True):
            typname, element, typmod = self._base_type(types[oid], mod)
            m = map_type(typname, typmod, element, 0)
            if name in q.key and (pa.types.is_list(m.arrow_type) or typname == "json"):
                raise ConfigError(f"key column {name!r} is of type {decl}, which cannot order "
                                  "rows as a key; choose scalar columns")
            mappings.append(m)
            columns.append(Column(name=name, source_type=decl, arrow_type=m.arrow_type,
                                  nullable=name not in q.key, logical_type=m.logical_type))
        by_name = dict(zip(names, declared, strict=True))
        self._plans[q.name] = ReadPlan(qualified=wrapped, mappings=tuple(mappings),
                                    key_types=tuple(by_name[k] for k in q.key))
        estimate = None
        with contextlib.suppress(KeyError, IndexError, TypeError, ValueError):
            estimate = int(plan[0][0]["Plan"]["Plan Rows"])  # type: ignore[index]  # EXPLAIN's JSON
        return TableInfo(name=q.name, columns=tuple(columns), key_columns=q.key,
                         row_estimate=estimate, primary_key=q.key)

    def _result_page(self, table: TableInfo, after: Key | None, limit: int
                     ) -> Iterator[pa.RecordBatch]:
        return PostgresSource.read(self, table, after, limit)

    def _translate(self, exc: Exception, sqlstate: str | None, table: str | None
                   ) -> EgressError:
        return self._query_error(exc, sqlstate, describing=False)

    def _query_error(self, exc: Exception, sqlstate: str | None, *, describing: bool
                     ) -> EgressError:
        lines = self._scrub(str(exc)).strip().splitlines() or [type(exc).__name__]
        detail = next((ln for ln in lines if "ERROR:" in ln), lines[0])
        detail = detail.split("ERROR:", 1)[-1].strip()
        name = self.query.name
        if sqlstate == "57014" and "statement timeout" in str(exc):
            return timeout_error(self.query, self.timeout)
        if sqlstate == "25006":
            return ConfigError(f"query export {name!r} tried to write: {detail} "
                               "(query exports run in a READ ONLY transaction)")
        if describing and sqlstate == "08P01" and "parameters" in detail:
            return ConfigError(f"query export {name!r}: the query may not contain "
                               f"parameters ($1, $2…): {detail}")
        base = super()._translate(exc, sqlstate, None)
        if isinstance(base, SourceUnavailableError | DataError):
            return base
        if describing:  # the request's fault: 422 with PostgreSQL's reason
            return ConfigError(f"query export {name!r}: PostgreSQL refused the query: {detail} "
                               "(a query export runs one read-only SELECT statement)")
        return SourceError(f"cannot read query export {name!r}: {detail} "
                           f"(SQLSTATE {sqlstate or 'unknown'})")
