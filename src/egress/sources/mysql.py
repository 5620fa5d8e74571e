"""MySQL / MariaDB source: the catalog from information_schema, rows through PyMySQL.

``mysql://user:password@host:3306/database`` (also ``mariadb://``, ``mysql+pymysql://``;
``?unix_socket=/path`` connects through a socket). Without a password in the URL the
environment's ``MYSQL_PWD`` is sent, if set. The tables are the base tables of the URL's
database.

The driver is PyMySQL: pure Python, so it installs from a wheel on any machine with no
C headers or client library (mysqlclient needs libmariadb-dev and a compiler;
mysql-connector-python's C extension and MariaDB Connector/Python need the C connector),
it is maintained by the PyMySQL organisation, and its unbuffered ``SSCursor`` streams a
result row by row instead of holding it in memory. Its value converters are switched
off: values arrive as the server's own text (or bytes for binary columns) and are made
into Arrow arrays by vectorised casts (:mod:`egress.sources.mysql_types`), so nothing is
rounded through Python floats or datetimes.

Each session is ``utf8mb4``, in UTC (``time_zone = '+00:00'``, the zone TIMESTAMP
values are written in), and ``READ ONLY``; every statement runs in autocommit, so each
page is one consistent InnoDB snapshot. Rows are read by keyset pagination over the
primary key (or else the narrowest UNIQUE index over NOT NULL columns):
``WHERE k1 >= ? AND (k1 > ? OR (k1 = ? AND k2 > ?)) ORDER BY k1, k2 LIMIT n`` — the
expanded form of ``(k1, k2) > (?, ?)``, because MariaDB does not use an index range for
a row comparison and would scan the table from its start for every page. Identifiers
come from the catalog, backquoted; every value (cursor, filter, LIMIT) is bound.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pyarrow as pa
import pymysql
import pymysql.converters
import pymysql.cursors

from egress.domain.keys import Key
from egress.domain.predicate import Predicate, Scalar
from egress.exceptions import (
    DataError,
    EgressError,
    NoUsableKeyError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.redact import redact_url, scrub, url_secrets
from egress.sources.base import Column, TableInfo
from egress.sources.mysql_catalog import (
    COLUMNS_SQL,
    JSON_CHECKS_SQL,
    KEYS_SQL,
    SIZE_SQL,
    TABLES_SQL,
)
from egress.sources.mysql_errors import connect_error, errno_of, message_of, read_error
from egress.sources.mysql_split import bounds_from_ranked, ranked_query, sample_step
from egress.sources.mysql_types import BadValue, MyMapping, convert, map_type
from egress.sources.predicate_sql import render_conditions
from egress.sources.timestamps import instant_text

DEFAULT_PORT = 3306
#: Seconds to wait for the server to accept a connection.
CONNECT_TIMEOUT = 10
#: Rows fetched from the stream at a time: one Arrow batch each.
FETCH_ROWS = 8192
#: Tables whose data is up to this size get an exact count(*) as their row estimate.
EXACT_COUNT_BYTES = 64 * 1024 * 1024
SESSION_SETTINGS = (
    "SET SESSION TRANSACTION READ ONLY",
    "SET time_zone = '+00:00'",
)

def quote_ident(name: str) -> str:
    """A backquoted identifier, with ``%`` doubled for PyMySQL's parameter formatting."""
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


@dataclass(frozen=True)
class MySqlParams:
    host: str
    port: int
    user: str
    password: str | None
    database: str
    unix_socket: str | None = None


def parse_url(url: str) -> MySqlParams:
    """The connection parameters of ``mysql://user:password@host:port/database``."""
    scheme, sep, _rest = url.partition("://")
    expected = "expected mysql://user:password@host:port/database"
    if not sep or scheme.split("+", 1)[0].lower() not in ("mysql", "mariadb"):
        raise SourceError(f"not a MySQL URL: {redact_url(url)!r} ({expected})")
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise SourceError(f"bad MySQL URL {redact_url(url)!r}: {exc} ({expected})") from None
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise SourceError(f"the MySQL URL {redact_url(url)!r} names no database ({expected})")
    query = parse_qs(parts.query)
    password = unquote(parts.password) if parts.password is not None else None
    return MySqlParams(
        host=parts.hostname or "localhost", port=port, user=unquote(parts.username or ""),
        password=password if password is not None else os.environ.get("MYSQL_PWD"),
        database=database, unix_socket=next(iter(query.get("unix_socket", [])), None),
    )


@dataclass(frozen=True)
class _Plan:
    """What ``read`` needs to know about a described table."""

    quoted: str
    mappings: tuple[MyMapping, ...]
    key_binds: tuple[str, ...]
    key_positions: tuple[int, ...]


class MySqlSource:
    dialect = "mysql"

    def __init__(self, url: str) -> None:
        self._params = parse_url(url)
        self._where = redact_url(url)
        self._secrets = url_secrets(url)
        self._conn: pymysql.connections.Connection[Any] | None = None
        #: The unbuffered cursor of the read() whose rows are being streamed.
        self._streaming: pymysql.cursors.SSCursor | None = None
        self._plans: dict[str, _Plan] = {}
        self._mariadb = "mariadb" in str(self._connection().get_server_info()).lower()

    # --- connection ---------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def _connection(self) -> pymysql.connections.Connection[Any]:
        if self._conn is not None and self._conn.open:
            return self._conn
        p = self._params
        try:
            conn = pymysql.connect(
                host=p.host, port=p.port, user=p.user, password=p.password or "",
                database=p.database, unix_socket=p.unix_socket, charset="utf8mb4",
                connect_timeout=CONNECT_TIMEOUT, autocommit=True,
                # encoders only: values arrive as the server's text (or bytes)
                conv=dict(pymysql.converters.encoders),  # type: ignore[arg-type]
            )
        except pymysql.err.MySQLError as exc:
            raise connect_error(self._where, errno_of(exc),
                                self._scrub(message_of(exc))) from None
        try:
            with conn.cursor() as cur:
                for statement in SESSION_SETTINGS:
                    cur.execute(statement)
        except pymysql.err.MySQLError as exc:
            conn.close()
            raise connect_error(self._where, errno_of(exc),
                                self._scrub(message_of(exc))) from None
        self._conn = conn
        return conn

    def _drop(self) -> None:
        conn, self._conn, self._streaming = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        self._drop()

    def _end_stream(self) -> None:
        """Close a streaming cursor left open (its remaining rows are read and dropped:
        the connection runs one statement at a time)."""
        cur, self._streaming = self._streaming, None
        if cur is not None:
            try:
                cur.close()
            except pymysql.err.MySQLError:
                self._drop()

    def _error(self, exc: BaseException, what: str) -> EgressError:
        error = read_error(self._where, what, errno_of(exc), self._scrub(message_of(exc)))
        if isinstance(error, SourceUnavailableError):
            self._drop()
        return error

    def _fetch(self, query: str, args: tuple[Any, ...] = (),
               what: str = "the MySQL catalog") -> list[tuple[Any, ...]]:
        self._end_stream()
        try:
            with self._connection().cursor() as cur:
                cur.execute(query, args)
                return list(cur.fetchall())
        except pymysql.err.MySQLError as exc:
            raise self._error(exc, what) from None

    # --- catalog ------------------------------------------------------------------------

    def tables(self) -> list[str]:
        return [str(name) for (name,) in self._fetch(TABLES_SQL)]

    def describe(self, table: str) -> TableInfo:
        rows = self._fetch(COLUMNS_SQL, (table,))
        listed = self.tables()
        if not rows or table not in listed:
            raise TableNotFoundError(table, listed)
        json_columns: set[str] = set()
        if self._mariadb:
            for (clause,) in self._fetch(JSON_CHECKS_SQL, (table,)):
                inner = str(clause)[len("json_valid("):-1].strip()
                if inner.startswith("`") and inner.endswith("`"):
                    json_columns.add(inner[1:-1].replace("``", "`"))
        columns, mappings = [], []
        for name, data_type, column_type, precision, scale, nullable in rows:
            mapping = map_type(str(data_type), str(column_type),
                               None if precision is None else int(precision),
                               None if scale is None else int(scale), name in json_columns)
            declared = "json" if name in json_columns else str(column_type)
            mappings.append(mapping)
            columns.append(Column(name=str(name), source_type=declared,
                                  arrow_type=mapping.arrow_type, nullable=nullable == "YES",
                                  logical_type=mapping.logical_type))
        primary, key = self._choose_key(table, columns, mappings)
        by_name = {c.name: i for i, c in enumerate(columns)}
        self._plans[table] = _Plan(
            quoted=quote_ident(table), mappings=tuple(mappings),
            key_binds=tuple(mappings[by_name[k]].key_bind for k in key),
            key_positions=tuple(by_name[k] for k in key),
        )
        return TableInfo(name=table, columns=tuple(columns), key_columns=key,
                         row_estimate=self._estimate(table), primary_key=primary)

    def _choose_key(self, table: str, columns: list[Column], mappings: list[MyMapping]
                    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(primary key, key columns): the primary key, else the narrowest unique index
        whose columns are all NOT NULL and whole (no prefix) and can be ordered."""
        by_name = {c.name: (c, m) for c, m in zip(columns, mappings, strict=True)}
        indexes: dict[str, list[tuple[str, Any]]] = {}
        for index, column, sub_part in self._fetch(KEYS_SQL, (table,)):
            indexes.setdefault(str(index), []).append((str(column), sub_part))
        primary = tuple(c for c, _ in indexes.get("PRIMARY", []))
        refusals = []
        for index, parts in sorted(indexes.items(),
                                   key=lambda kv: (kv[0] != "PRIMARY", len(kv[1]), kv[0])):
            names = tuple(c for c, _ in parts)
            if any(c not in by_name for c in names):
                continue  # a column the user may not see
            why = next((f"column {c!r}: {by_name[c][1].not_a_key}" for c in names
                        if by_name[c][1].not_a_key), None)
            if why is None and any(by_name[c][0].nullable for c in names):
                why = "a column may be NULL"
            if why is None and any(sub is not None for _, sub in parts) and index != "PRIMARY":
                why = "it indexes a prefix of a column"
            if why is None:
                return primary, names
            refusals.append(f"{index} ({why})")
        unusable = f"; keys that cannot be used: {'; '.join(refusals)}" if refusals else ""
        raise NoUsableKeyError(
            f"table {table!r} has no primary key and no unique index over NOT NULL columns "
            "that egress can page by, so it cannot be read in key order (egress never pages "
            f"with OFFSET){unusable}; add a PRIMARY KEY (e.g. ALTER TABLE ... ADD COLUMN id "
            "BIGINT AUTO_INCREMENT PRIMARY KEY)"
        )

    def _estimate(self, table: str) -> int | None:
        found = self._fetch(SIZE_SQL, (table,))
        if not found:
            return None
        rows, size = found[0]
        if size is not None and int(size) <= EXACT_COUNT_BYTES:
            return int(self._fetch(f"SELECT count(*) FROM {quote_ident(table)}")[0][0])
        return None if rows is None else int(rows)

    def split_points(self, table: TableInfo, count: int) -> list[Any]:
        """Boundaries of ``count`` key ranges of ``table`` with about equal rows: at most
        ``count - 1`` values of its first key column, strictly increasing in the column's
        order (its collation), as the cursor holds them (engine/split.py;
        sources/mysql_split.py)."""
        plan = self._plan(table)
        what = f"table {table.name!r} (planning its split)"
        key = "t." + quote_ident(table.key_columns[0])
        mapping = plan.mappings[plan.key_positions[0]]
        (rows,) = self._fetch(f"SELECT count(*) FROM {plan.quoted}", what=what)[0]
        ranked = self._fetch(ranked_query(plan.quoted, key, mapping.select.format(c=key)),
                             (sample_step(int(rows), count),), what=what)
        bounds = bounds_from_ranked(ranked, count)
        try:  # the cursor's form: the Arrow value of the selected text, as the reads make
            return list(convert(bounds, mapping).to_pylist())
        except BadValue as bad:
            raise DataError(f"table {table.name!r}, key column {table.key_columns[0]!r}: "
                            f"{bad.reason}") from None

    def key_at_rows(self, table: TableInfo,
                    ends_of: Callable[[int], list[int]]) -> tuple[int, list[Any]]:
        """Rows of ``table`` and the values of its first key column at the 1-based row
        numbers ``ends_of(rows)`` in key order (its collation), as the cursor holds them
        (a stitched split: engine/stitch.py): exact, a count and one pass over the key
        (``ROW_NUMBER()``), both in one consistent snapshot."""
        plan = self._plan(table)
        what = f"table {table.name!r} (planning its split)"
        key = "t." + quote_ident(table.key_columns[0])
        mapping = plan.mappings[plan.key_positions[0]]
        self._end_stream()
        try:
            with self._connection().cursor() as cur:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                try:
                    cur.execute(f"SELECT count(*) FROM {plan.quoted}")
                    rows = int(cur.fetchone()[0])
                    ends = ends_of(rows)
                    values: list[Any] = []
                    if ends:
                        marks = ", ".join("%s" for _ in ends)  # row numbers of ours, bound
                        cur.execute(
                            f"SELECT x.k FROM (SELECT {mapping.select.format(c=key)} AS k, "
                            f"ROW_NUMBER() OVER (ORDER BY {key}) AS n FROM {plan.quoted} AS t)"
                            f" AS x WHERE x.n IN ({marks}) ORDER BY x.n", tuple(ends))
                        values = [v for (v,) in cur.fetchall()]
                finally:
                    cur.execute("COMMIT")
        except pymysql.err.MySQLError as exc:
            raise self._error(exc, what) from None
        try:  # the cursor's form: the Arrow value of the selected text, as the reads make
            return rows, list(convert(values, mapping).to_pylist())
        except BadValue as bad:
            raise DataError(f"table {table.name!r}, key column {table.key_columns[0]!r}: "
                            f"{bad.reason}") from None

    # --- rows ---------------------------------------------------------------------------

    def _plan(self, table: TableInfo) -> _Plan:
        plan = self._plans.get(table.name)
        if plan is None:
            self.describe(table.name)
            plan = self._plans[table.name]
        return plan

    def keyset_query(self, table: TableInfo, after: Key | None, limit: int,
                     predicate: Predicate | None = None) -> tuple[str, list[Any]]:
        """The page query and its parameters (PyMySQL ``%s`` placeholders)."""
        plan = self._plan(table)

        def col(name: str) -> str:
            # qualified: ORDER BY and WHERE must not resolve to a selected expression
            return "t." + quote_ident(name)

        selects = [m.select.format(c=col(c.name)) + " AS " + quote_ident(c.name)
                   for c, m in zip(table.columns, plan.mappings, strict=True)]
        keys = [col(k) for k in table.key_columns]
        conditions: list[str] = []
        params: list[Any] = []
        if after is not None:
            condition, params = _after(keys, plan.key_binds, list(after))
            conditions.append(condition)
        bounds = predicate.key_range if predicate is not None else None
        if bounds is not None:  # a range of a split table: its first key column, bound
            if bounds.lo is not None:  # like the cursor
                conditions.append(f"{keys[0]} > {plan.key_binds[0]}")
                params.append(bounds.lo)
            if bounds.hi is not None:
                conditions.append(f"{keys[0]} <= {plan.key_binds[0]}")
                params.append(bounds.hi)
        types = {c.name: c.source_type.split("(", 1)[0].lower() for c in table.columns}

        def bind(column: str, value: Scalar) -> str:
            if types[column] in ("datetime", "timestamp") and isinstance(value, str):
                value = instant_text(value)  # an instant in UTC, as the session's zone
            params.append(value)
            return "%s"

        conditions += render_conditions(predicate, col, bind, key_range_rendered=True)
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        params.append(int(limit))
        query = (f"SELECT {', '.join(selects)} FROM {plan.quoted} AS t{where} "
                 f"ORDER BY {', '.join(keys)} LIMIT %s")
        return query, params

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        plan = self._plan(table)
        query, params = self.keyset_query(table, after, limit, predicate)
        schema = table.schema
        self._end_stream()
        what = f"table {table.name!r}"
        try:
            cur = pymysql.cursors.SSCursor(self._connection())
        except pymysql.err.MySQLError as exc:
            raise self._error(exc, what) from None
        self._streaming = cur
        try:
            cur.execute(query, tuple(params))
            while True:
                rows = cur.fetchmany(FETCH_ROWS)
                if not rows:
                    break
                columns = list(zip(*rows, strict=True))
                arrays, bad = [], []
                for i, mapping in enumerate(plan.mappings):
                    try:
                        arrays.append(convert(columns[i], mapping))
                    except BadValue as refused:
                        bad.append((refused.index, i, refused))
                if bad:  # the first refused row in key order
                    _, column, first = min(bad, key=lambda b: b[:2])
                    raise _bad_value(table, plan, columns, column, first) from None
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        except pymysql.err.MySQLError as exc:
            raise self._error(exc, what) from None
        finally:
            if self._streaming is cur:
                self._end_stream()


def _after(keys: list[str], binds: tuple[str, ...], values: list[Any]
           ) -> tuple[str, list[Any]]:
    """``(k1, k2, …) > (v1, v2, …)`` expanded so that MariaDB uses an index range:
    ``k1 >= v1 AND (k1 > v1 OR (k1 = v1 AND (k2 > v2 OR …)))``."""
    n = len(keys)
    inner = f"{keys[-1]} > {binds[-1]}"
    params_inner: list[Any] = [values[-1]]
    for i in range(n - 2, -1, -1):
        inner = f"{keys[i]} > {binds[i]} OR ({keys[i]} = {binds[i]} AND ({inner}))"
        params_inner = [values[i], values[i], *params_inner]
    if n == 1:
        return inner, params_inner
    return f"{keys[0]} >= {binds[0]} AND ({inner})", [values[0], *params_inner]


def _bad_value(table: TableInfo, plan: _Plan, columns: list[tuple[Any, ...]], index: int,
               bad: BadValue) -> DataError:
    column = table.columns[index]
    key = ", ".join(f"{name}={_show(columns[pos][bad.index], plan.mappings[pos])}"
                    for name, pos in zip(table.key_columns, plan.key_positions, strict=True))
    return DataError(f"table {table.name!r}, column {column.name!r} ({column.source_type}), "
                     f"row with key {key}: {bad.reason}")


def _show(raw: Any, mapping: MyMapping) -> str:
    """A key value as the user would write it: its Arrow value, else the server's text."""
    try:
        value = convert([raw], mapping)[0].as_py()
    except BadValue:
        value = raw
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return repr(value) if isinstance(value, str) else str(value)
