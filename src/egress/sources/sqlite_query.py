"""A free-form query on a SQLite database (see :mod:`egress.sources.query`).

Read-only, three ways: the connection is opened ``mode=ro`` with ``PRAGMA query_only``;
the query only ever runs as a subquery (``SELECT … FROM (<query>)``), where SQLite
parses nothing but a SELECT, WITH … SELECT or VALUES (no INSERT/DELETE/DROP/ATTACH/
PRAGMA, no writing CTE); and Python's sqlite3 refuses a second statement. Parameters
(``?``, ``:name``) are refused too: the query has none to bind.

The result's declared types come from a TEMP view over the query (``pragma_table_info``
shows the declared type of each column that is a table column, through subqueries and
joins; an expression has none and keeps each value's storage class), so a column is
typed exactly as it is in a table export. Rows are read through Python's sqlite3
because it can stop a statement: a progress handler cancels a page that runs past the
timeout (the ADBC driver cannot be interrupted).
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from egress.domain.keys import Key
from egress.exceptions import ConfigError, DataError, SourceError, SourceUnavailableError
from egress.sources.base import Column, TableInfo
from egress.sources.query import (
    Query,
    QueryCatalog,
    check_result_columns,
    timeout_error,
)
from egress.sources.sqlite import RAW_KEY, path_from_url, quote_ident
from egress.sources.sqlite_types import (
    DYNAMIC,
    DYNAMIC_MAPPING,
    Convert,
    data_error,
    dynamic,
    map_declared_type,
)

BATCH_ROWS = 16384
#: SQLite VM instructions between two looks at the clock.
PROGRESS_STEPS = 10_000
_VIEW = "egress_query"
#: The Arrow type of a selected expression, from the literal that primes it in sqlite.py.
_DUMMY_TYPES = {"0": pa.int64(), "0.0": pa.float64(), "''": pa.string(), "x''": pa.binary()}


class SqliteQuerySource(QueryCatalog):
    dialect = "sqlite"

    def __init__(self, url: str, query: Query, timeout: float) -> None:
        self.query, self.timeout = query, timeout
        path = path_from_url(url)
        if not path.is_file():
            raise SourceUnavailableError(f"cannot open SQLite database {path}: no such file")
        uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
        try:
            # read on the engine's read-ahead thread, never at the same time as describe
            self._conn = sqlite3.connect(uri, uri=True, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise SourceUnavailableError(f"cannot open SQLite database {path}: {exc}") from exc
        self._deadline = float("inf")
        self._conn.set_progress_handler(self._past_deadline, PROGRESS_STEPS)
        self._info: TableInfo | None = None
        self._selects: list[str] = []
        self._converters: list[tuple[list[pa.DataType], Convert]] = []
        self._key_sql: list[str] = []

    def close(self) -> None:
        self._conn.close()

    def _past_deadline(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """Execute under the timeout; the caller fetches within it too."""
        self._deadline = time.monotonic() + self.timeout
        return self._conn.execute(sql, params)

    def _describe(self) -> TableInfo:
        q = self.query
        try:
            # the TEMP view is written to the connection's own temp database, never to
            # the file; after it, nothing may write at all
            self._conn.execute(f"DROP VIEW IF EXISTS temp.{_VIEW}")
            self._conn.execute(f"CREATE TEMP VIEW {_VIEW} AS SELECT * FROM (\n{q.sql}\n)")
            self._conn.execute("PRAGMA query_only = ON")
            cur = self._run(f"SELECT * FROM temp.{_VIEW} LIMIT 0")
            names = [d[0] for d in cur.description]
            declared = dict(self._conn.execute(
                "SELECT name, type FROM pragma_table_info(?, 'temp')", (_VIEW,)).fetchall())
        except sqlite3.Error as exc:
            if _interrupted(exc):
                raise timeout_error(q, self.timeout) from exc
            raise ConfigError(
                f"query export {q.name!r}: SQLite refused the query: {_refusal(str(exc))} "
                "(a query export runs one read-only SELECT, WITH … SELECT or VALUES statement)"
            ) from exc
        finally:
            self._deadline = float("inf")
        check_result_columns(names, q, self.dialect)
        columns: list[Column] = []
        hidden: list[pa.Field] = []
        key_columns: list[str] = []
        mappings = {}
        for name in names:
            decl = declared.get(name) or ""
            m = mappings[name] = map_declared_type(decl)
            columns.append(Column(name=name, source_type=decl, arrow_type=m.arrow_type,
                                  nullable=name not in q.key, logical_type=m.logical_type))
            self._add(name, m.selects, m.convert)
        for i, k in enumerate(q.key):
            self._key_sql.append("q." + quote_ident(k))
            if mappings[k].exact_key:
                key_columns.append(k)
                continue
            # the raw stored value, with its storage class, is the cursor (as in tables)
            raw = f"{RAW_KEY}{i}"
            key_columns.append(raw)
            hidden.append(pa.field(raw, DYNAMIC))
            self._add(k, DYNAMIC_MAPPING.selects, dynamic)
        self._schema = pa.schema([c.field() for c in columns] + hidden)
        return TableInfo(name=q.name, columns=tuple(columns), key_columns=tuple(key_columns),
                         hidden_columns=tuple(f.name for f in hidden), row_estimate=None,
                         primary_key=q.key)

    def _add(self, name: str, selects: tuple[tuple[str, str], ...], convert: Convert) -> None:
        col = "q." + quote_ident(name)
        self._selects += [sql.format(c=col) for sql, _ in selects]
        self._converters.append(([_DUMMY_TYPES[d] for _, d in selects], convert))

    def _result_page(self, table: TableInfo, after: Key | None, limit: int
                     ) -> Iterator[pa.RecordBatch]:
        keys = ", ".join(self._key_sql)
        where, params = "", list(after or ())
        if after is not None:
            where = (f"WHERE ({keys}) > ({', '.join('?' for _ in after)}) " if len(after) > 1
                     else f"WHERE {keys} > ? ")
        sql = (f"SELECT {', '.join(self._selects)} FROM (\n{self.query.sql}\n) AS q "
               f"{where}ORDER BY {keys} LIMIT ?")
        try:
            cur = self._run(sql, (*params, limit))
            while True:
                rows = cur.fetchmany(BATCH_ROWS)
                if not rows:
                    break
                yield self._batch(rows)
        except sqlite3.Error as exc:
            if _interrupted(exc):
                raise timeout_error(self.query, self.timeout) from exc
            raise _translate(exc, self.query) from exc
        finally:
            self._deadline = float("inf")

    def _batch(self, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        values = list(zip(*rows, strict=True))
        arrays, position = [], 0
        for field, (types, convert) in zip(self._schema, self._converters, strict=True):
            group = [_array(values[position + i], t, field) for i, t in enumerate(types)]
            arrays.append(convert(group, field))
            position += len(types)
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def _array(values: tuple[Any, ...], type_: pa.DataType, field: pa.Field) -> pa.Array:
    """One selected expression as ``type_``; values of another storage class become
    text (as the ADBC driver widens a column), which the column's converter then casts
    or refuses with a DataError."""
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    if any(isinstance(v, bytes) for v in values) and not pa.types.is_binary(type_):
        raise data_error(field, ValueError("a BLOB value in a column of another type"))
    return pa.array([v if v is None or isinstance(v, str) else str(v) for v in values],
                    pa.string())


def _interrupted(exc: Exception) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "interrupt" in str(exc)


def _refusal(message: str) -> str:
    if "one statement" in message or 'near ";"' in message:
        return f"{message}: the query must be one statement (no ';' between statements)"
    if "bindings" in message or "parameters are not allowed" in message:
        return f"{message}: the query may not contain parameters (?, :name)"
    return message


def _translate(exc: sqlite3.Error, query: Query) -> SourceError:
    message = str(exc)
    if "locked" in message or "busy" in message:
        return SourceUnavailableError(f"SQLite database is busy: {message}")
    if "readonly" in message or "read-only" in message:
        return SourceError(f"query export {query.name!r} tried to write: {message} "
                           "(query exports are read-only)")
    return DataError(f"cannot read query export {query.name!r}: {message}")
