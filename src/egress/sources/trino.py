"""Trino (and Starburst) as a source: the catalog through ``information_schema``, rows
from a query's result pages.

A Trino result is a stream: each ``nextUri`` fetched moves the engine past the page before
it, and only the last page fetched can be fetched again. So the rows carry their place in
the stream as their key — ``(URI of the page, row index in it)``, hidden columns — and the
source is ``forward_only``: it is read on demand, never ahead, and a slice never drops
a part it has read (engine/slice.py). So after a slice every row fetched was committed,
and the next slice, on any worker, fetches the last committed page again and goes on
after the cursor's row. When the engine no longer holds that page (a crash that
had fetched further, an expired query) reading raises ResultGoneError: the caller starts
that table over from nothing, never mixing two runs of the query (docs/trino.md).

Names in SQL: tables are checked against ``information_schema`` and quoted as identifiers;
the schema name is a quoted string literal. The engine's protocol binds no parameters.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.exceptions import ConfigError, SourceUnavailableError, TableNotFoundError
from egress.sources.base import Column, TableInfo
from egress.sources.query import Query
from egress.sources.trino_client import QueryResults, TrinoClient, TrinoEndpoint
from egress.sources.trino_types import column, to_batch

PAGE_COLUMN = "__egress_page"
ROW_COLUMN = "__egress_row"
#: Seconds between polls of a catalog query or of a result with no rows yet (doubling).
_FIRST_WAIT, _MAX_WAIT = 0.05, 1.0


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class _Page:
    uri: str
    rows: list[list[Any]]
    next_uri: str | None


class TrinoSource:
    """The tables of one Trino catalog and schema (``query`` None) or one query's result."""

    dialect = "trino"
    #: a result page fetched moves the engine on: never read ahead, never drop a part
    #: read (see the module doc)
    forward_only = True

    def __init__(self, url: str, query: Query | None = None, timeout: float = 300.0, *,
                 role: str | None = None, tags: tuple[str, ...] = ()) -> None:
        self.endpoint = TrinoEndpoint.parse(url)
        self.client = TrinoClient(self.endpoint)
        self.query, self.timeout = query, timeout
        self.role, self.tags = role, tags
        #: set by a worker that resumes a result from the job store: where it starts
        self.start_uri: str | None = None
        self.result_columns: list[list[str]] | None = None
        self._tables: list[str] | None = None
        self._page: _Page | None = None
        #: the result's first page, once fetched: a sample and the first read share it
        self._first: _Page | None = None
        #: the URI a cancel must DELETE: the last one fetched, or the next one
        self.current_uri: str | None = None

    def close(self) -> None:
        self.client.close()

    # --- SQL ----------------------------------------------------------------------------

    def table_sql(self, table: str) -> str:
        e = self.endpoint
        return "SELECT * FROM " + ".".join(quote_identifier(n) for n in
                                           (e.catalog, e.schema, table))

    def result_sql(self, table: str) -> str:
        """The statement whose result is ``table``'s output."""
        if self.query is None:
            return self.table_sql(table)
        key = ", ".join(quote_identifier(k) for k in self.query.key)
        # ordered by the key: a query started over returns the same rows in the same order
        return f"SELECT * FROM (\n{self.query.sql}\n) AS egress_query ORDER BY {key}"

    # --- small queries (catalog) ----------------------------------------------------------

    def run(self, sql: str) -> tuple[list[list[str]], list[list[Any]]]:
        """Run a small query to its end: its columns and every row."""
        deadline = time.monotonic() + self.timeout
        results = self.client.submit(sql, role=self.role, tags=self.tags)
        rows: list[list[Any]] = []
        columns = results.columns
        wait = _FIRST_WAIT
        while True:
            if results.error is not None:
                raise results.error
            rows.extend(results.data)
            columns = results.columns or columns
            if results.next_uri is None:
                return columns or [], rows
            if time.monotonic() > deadline:
                self.client.cancel(results.next_uri)
                raise SourceUnavailableError(
                    f"Trino did not answer a catalog query within {self.timeout:.0f} s")
            if not results.data:
                time.sleep(wait)
                wait = min(wait * 2, _MAX_WAIT)
            results = self.client.fetch(results.next_uri, role=self.role)

    def tables(self) -> list[str]:
        if self.query is not None:
            return [self.query.name]
        if self._tables is None:
            _, rows = self.run(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                + quote_literal(self.endpoint.schema) + " ORDER BY table_name")
            self._tables = [r[0] for r in rows]
        return list(self._tables)

    def describe(self, table: str) -> TableInfo:
        if self.query is not None:
            if table != self.query.name:
                raise TableNotFoundError(table, [self.query.name])
            columns, _ = self.run(f"SELECT * FROM (\n{self.query.sql}\n) AS egress_query "
                                  "LIMIT 0")
            return info_from_columns(table, columns)
        known = self.tables()
        if table not in known:
            raise TableNotFoundError(table, known)
        _, rows = self.run(
            "SELECT column_name, data_type FROM information_schema.columns "
            f"WHERE table_schema = {quote_literal(self.endpoint.schema)} "
            f"AND table_name = {quote_literal(table)} ORDER BY ordinal_position")
        return info_from_columns(table, [[r[0], r[1]] for r in rows])

    # --- the result stream --------------------------------------------------------------

    def _fetch(self, uri: str) -> _Page:
        """The page at ``uri``; pages without rows (the query still running) are
        followed with a growing wait."""
        wait = _FIRST_WAIT
        while True:
            self.current_uri = uri
            results = self.client.fetch(uri, role=self.role)
            if results.error is not None:
                raise results.error
            if results.columns is not None and self.result_columns is None:
                self.result_columns = results.columns
            if results.data or results.next_uri is None:
                page = _Page(uri, results.data, results.next_uri)
                self.current_uri = results.next_uri or uri
                return page
            # nothing yet: the same URI is not asked twice, the next one is
            if results.next_uri != uri:
                uri = results.next_uri
            time.sleep(wait)
            wait = min(wait * 2, _MAX_WAIT)

    def _start(self, table: str) -> _Page:
        if self.start_uri is not None:
            return self._fetch(self.start_uri)
        results = self.client.submit(self.result_sql(table), role=self.role, tags=self.tags)
        return self._open_result(results)

    def _open_result(self, results: QueryResults) -> _Page:
        if results.error is not None:
            raise results.error
        if results.next_uri is None:
            return _Page("", results.data, None)
        return self._fetch(results.next_uri)

    def sample(self, table: TableInfo, limit: int) -> Iterator[pa.RecordBatch]:
        """Up to ``limit`` rows of the result's first page, without moving the engine past
        it (the planner's sample of row sizes)."""
        if self._first is None:
            self._first = self._start(table.name)
        rows = self._first.rows[:limit]
        if rows:
            yield to_batch(list(table.columns), rows, self._keys(self._first, 0, len(rows)))

    @staticmethod
    def _keys(page: _Page, start: int, count: int) -> dict[str, pa.Array]:
        return {PAGE_COLUMN: pa.array([page.uri] * count, pa.string()),
                ROW_COLUMN: pa.array(range(start, start + count), pa.int64())}

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        if predicate is not None:
            raise ConfigError("filters are not supported on a Trino source: "
                              "export a query with a WHERE clause instead")
        if after is None:
            if self._first is None:
                self._first = self._start(table.name)
            page, index = self._first, 0
        else:
            uri, row = after
            if self._page is not None and self._page.uri == uri:
                page = self._page
            else:
                page = self._fetch(uri)  # the engine still holds it, or ResultGoneError
            index = row + 1
        self._page = page
        columns = [c for c in table.columns]
        got = 0
        while got < limit:
            if index >= len(page.rows):
                if page.next_uri is None:
                    return
                page = self._page = self._fetch(page.next_uri)
                index = 0
                continue
            take = min(limit - got, len(page.rows) - index)
            rows = page.rows[index:index + take]
            yield to_batch(columns, rows, self._keys(page, index, take))
            index += take
            got += take


def info_from_columns(table: str, columns: list[list[str]]) -> TableInfo:
    """The TableInfo of a result with these ``[name, type]`` columns."""
    cols: tuple[Column, ...] = tuple(column(name, type_) for name, type_ in columns)
    return TableInfo(name=table, columns=cols, key_columns=(PAGE_COLUMN, ROW_COLUMN),
                     hidden_columns=(PAGE_COLUMN, ROW_COLUMN), opaque_key=True)
