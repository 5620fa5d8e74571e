"""SQLite source: the catalog from PRAGMAs, rows through the ADBC SQLite driver.

SQLite is dynamically typed, so the declared type of each column decides the Arrow
type (the affinity rules of https://sqlite.org/datatype3.html plus the common names
DATE, DATETIME, TIMESTAMP, TIMESTAMPTZ, BOOLEAN, DECIMAL(p,s) and JSON; the mapping is
documented in docs/formats.md). The ADBC driver infers a stream's types from its first
batch of rows and fails the stream on a later value of another type; an all-NULL first
batch is taken for int64. A page is read with the bare query first: a column typed as
its selected expression means (or all NULL, which any type holds) is read on; one typed
otherwise reads the page on from there with a query that starts with one typed dummy
row (dropped again), so the driver infers the storage class each selected expression is
meant to have. The dummy row costs the driver 13-42 % of its read (docs/benchmarks.md,
session 24), so a table takes it only once a page needed it. Where the batches are cut
then changes no output: CSV, JSON and SQL write rows, and Parquet hands pyarrow chunks
cut on a fixed grid (formats/parquet.py).

A column without a declared type (or with one SQLite gives NUMERIC affinity and egress
cannot type further, like ``STRING``) keeps each value's own storage class: it is read
as a sparse union of integer, real, text and blob (:data:`DYNAMIC`), which the formats
render per value (a number stays a number, a blob stays a blob in a SQL dump).

Cursor values must compare in SQLite exactly as the stored values do. For key columns
whose Arrow value is not the stored value (a DATETIME text becomes a timestamp), a
hidden column carries the raw stored value as the same union; it is bound back with
its own storage class, so SQLite's ordering across storage classes is kept.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as adbc_sqlite
import pyarrow as pa

from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.exceptions import (
    DataError,
    NoUsableKeyError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources.base import Column, TableInfo
from egress.sources.predicate_sql import render_conditions
from egress.sources.sqlite_split import key_at_rows, split_points
from egress.sources.sqlite_types import (
    DYNAMIC,
    DYNAMIC_MAPPING,
    Convert,
    Mapping,
    MixedStorage,
    cast_column,
    dynamic,
    map_declared_type,
)
from egress.sources.timestamps import instant_text, sqlite_instant_sql

#: Hidden column carrying the rowid of a table without a primary key.
ROWID = "__egress_rowid"
#: Up to this many rowids the row estimate is an exact count(*) (about 10 ms per 100k
#: rows, before the first row is read); above, the largest rowid.
EXACT_COUNT_UNTIL = 200_000
#: Prefix of the hidden columns carrying the raw value of a key column.
RAW_KEY = "__egress_key_"
BATCH_ROWS = 16384
#: How the ADBC driver fails a stream on a value of another type than the column's.
_TYPE_MISMATCH = "Type mismatch"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def path_from_url(url: str) -> Path:
    """``sqlite:///rel/path.db`` → rel/path.db; ``sqlite:////abs/path.db`` → /abs/path.db."""
    if not url.startswith("sqlite:///"):
        raise SourceError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to.db)")
    return Path(url[len("sqlite:///") :])


#: The Arrow type the driver gives a selected expression whose dummy is this literal.
_DUMMY_TYPES = {"0": pa.int64(), "0.0": pa.float64(), "''": pa.string(), "x''": pa.binary()}


class _Retype(Exception):
    """A bare read met a column the driver typed otherwise than its expression means: the
    page is read on with the dummy row first."""


@dataclass(frozen=True)
class _Selection:
    """The selected expressions of a table's rows and how each output is made."""

    selects: tuple[str, ...]
    dummies: tuple[str, ...]
    #: (number of selected expressions, converter) per output and hidden column.
    converters: tuple[tuple[int, Convert], ...]

    @property
    def types(self) -> tuple[pa.DataType, ...]:
        """The Arrow type of each selected expression, as its dummy makes the driver read
        it."""
        return tuple(_DUMMY_TYPES[d] for d in self.dummies)


class _Columns:
    """Builds a :class:`_Selection`, one output column at a time."""

    def __init__(self) -> None:
        self.selects: list[str] = []
        self.dummies: list[str] = []
        self.converters: list[tuple[int, Convert]] = []

    def add(self, column_sql: str, selects: tuple[tuple[str, str], ...],
            convert: Convert) -> None:
        self.selects += [sql.format(c=column_sql) for sql, _ in selects]
        self.dummies += [dummy for _, dummy in selects]
        self.converters.append((len(selects), convert))

    def selection(self) -> _Selection:
        return _Selection(tuple(self.selects), tuple(self.dummies), tuple(self.converters))


@dataclass(frozen=True)
class _Plan:
    """How to read one table."""

    #: reads any stored value
    full: _Selection
    #: cheaper, for values stored in their column's usual class (sqlite_types.Mapping
    #: .fast); None if no column has one
    fast: _Selection | None
    #: The SQL expression of each key column, in key order.
    key_sql: tuple[str, ...]
    schema: pa.Schema
    #: (column, declared type, storage classes read) of each column that the full
    #: selection reads bare (sqlite_types.Mapping.stored)
    bare: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


class SqliteSource:
    dialect = "sqlite"

    def __init__(self, url: str) -> None:
        self.path = path_from_url(url)
        if not self.path.is_file():
            raise SourceUnavailableError(f"cannot open SQLite database {self.path}: no such file")
        # percent-encoded: a '?', '#' or '%' in the path would end it or change it
        uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro"
        try:
            # the read-ahead thread may describe a table on first read (one thread at a
            # time: SQLite's serialized mode makes the handle safe to pass between them)
            self._catalog = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._catalog.execute("SELECT count(*) FROM sqlite_master").fetchone()
            self._conn = adbc_sqlite.connect(uri)
        except (sqlite3.Error, OSError) as exc:
            raise SourceUnavailableError(f"cannot open SQLite database {self.path}: {exc}") from exc
        self._plans: dict[str, _Plan] = {}
        #: tables found to hold a value the fast selection does not take
        self._mixed: set[str] = set()
        #: tables with a page the bare query did not type as meant: read with the dummy
        self._dummied: set[str] = set()

    def close(self) -> None:
        self._catalog.close()
        self._conn.close()

    def hold_read_transaction(self) -> None:
        """Read every later page in one read transaction that starts now and lasts until
        :meth:`close` (one snapshot for a one-shot run: sources/snapshots.py)."""
        try:
            self._conn.rollback()  # whatever the connection read before: a fresh start
            with self._conn.cursor() as cur:  # not in autocommit: this read begins it
                cur.execute("SELECT count(*) FROM sqlite_master")
                cur.fetchall()
        except (OSError, adbc_driver_manager.Error) as exc:
            raise SourceUnavailableError(
                f"cannot begin a read transaction on SQLite database {self.path}: {exc}"
            ) from exc

    def tables(self) -> list[str]:
        rows = self._catalog.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
        ).fetchall()
        return [r[0] for r in rows]

    def describe(self, table: str) -> TableInfo:
        known = self.tables()
        if table not in known:
            raise TableNotFoundError(table, known)
        info = self._catalog.execute("SELECT * FROM pragma_table_info(?)", (table,)).fetchall()
        # cid, name, type, notnull, dflt_value, pk
        columns: list[Column] = []
        mappings: dict[str, Mapping] = {}
        pk = []
        for _cid, name, declared, notnull, _default, pk_pos in info:
            mapping = mappings[name] = map_declared_type(declared or "")
            columns.append(
                Column(
                    name=name,
                    source_type=declared or "",
                    arrow_type=mapping.arrow_type,
                    nullable=not notnull and not pk_pos,
                    logical_type=mapping.logical_type,
                )
            )
            if pk_pos:
                pk.append((pk_pos, name))
        primary_key = tuple(name for _, name in sorted(pk))
        full, fast = _Columns(), _Columns()
        for c in columns:
            m = mappings[c.name]
            full.add(quote_ident(c.name), m.selects, m.convert)
            if m.fast is not None:
                sql, dummy, convert = m.fast
                fast.add(quote_ident(c.name), ((sql, dummy),), convert)
            else:
                fast.add(quote_ident(c.name), m.selects, m.convert)
        hidden: list[pa.Field] = []
        key_sql: list[str]
        if primary_key:
            key_columns: list[str] = []
            key_sql = [quote_ident(k) for k in primary_key]
            for i, k in enumerate(primary_key):
                if mappings[k].exact_key:
                    key_columns.append(k)
                    continue
                # the raw stored value, with its storage class
                name = f"{RAW_KEY}{i}"
                key_columns.append(name)
                hidden.append(pa.field(name, DYNAMIC))
                for each in (full, fast):
                    each.add(key_sql[i], DYNAMIC_MAPPING.selects, dynamic)
        else:
            rowid = self._rowid_name(table, [c.name for c in columns])
            key_columns, key_sql = [ROWID], [rowid]
            hidden.append(pa.field(ROWID, pa.int64()))
            for each in (full, fast):
                each.add(rowid, (("{c}", "0"),), cast_column)
        schema = pa.schema([c.field() for c in columns] + hidden)
        has_fast = any(mappings[c.name].fast is not None for c in columns)
        bare = tuple((c.name, c.source_type, mappings[c.name].stored)
                     for c in columns if mappings[c.name].stored)
        self._plans[table] = _Plan(full.selection(), fast.selection() if has_fast else None,
                                   tuple(key_sql), schema, bare)
        estimate = self._estimate(table, [c.name for c in columns])
        return TableInfo(
            name=table,
            columns=tuple(columns),
            key_columns=tuple(key_columns),
            hidden_columns=tuple(f.name for f in hidden),
            row_estimate=int(estimate),
            primary_key=primary_key,
        )

    def _estimate(self, table: str, columns: list[str]) -> int:
        """Rows in ``table``: exact below ``EXACT_COUNT_UNTIL`` rowids, else the largest
        rowid (O(log n); a count(*) of a huge table would cost seconds on every slice)."""
        quoted = quote_ident(table)
        try:
            (top,) = self._catalog.execute(
                f"SELECT max({self._rowid_name(table, columns)}) FROM {quoted}"
            ).fetchone()
        except sqlite3.Error:  # WITHOUT ROWID table
            top = None
        if isinstance(top, int) and top > EXACT_COUNT_UNTIL:
            return top
        (count,) = self._catalog.execute(f"SELECT count(*) FROM {quoted}").fetchone()
        return int(count)

    def split_points(self, table: TableInfo, count: int) -> list[object]:
        """Boundaries of ``count`` key ranges of ``table`` with about equal rows: raw
        values of its first key column (engine/split.py; sources/sqlite_split.py)."""
        plan = self._plan(table)
        try:
            return split_points(self._catalog, quote_ident(table.name), plan.key_sql[0], count)
        except sqlite3.Error as exc:
            raise _translate(exc, table) from exc

    def key_at_rows(self, table: TableInfo,
                    ends_of: Callable[[int], list[int]]) -> tuple[int, list[object]]:
        """Rows of ``table`` and the raw values of its key at the row numbers
        ``ends_of(rows)`` (a stitched split: engine/stitch.py)."""
        plan = self._plan(table)
        try:
            return key_at_rows(self._catalog, quote_ident(table.name), plan.key_sql[0],
                               ends_of)
        except sqlite3.Error as exc:
            raise _translate(exc, table) from exc

    def _rowid_name(self, table: str, columns: list[str]) -> str:
        """The name that reaches the rowid: ``rowid`` unless a column took it."""
        lowered = {c.lower() for c in columns}
        for name in ("rowid", "_rowid_", "oid"):
            if name not in lowered:
                return name
        raise NoUsableKeyError(
            f"table {table!r} has no primary key and columns named rowid, _rowid_ and oid "
            "hide its rowid; add a primary key to export it"
        )

    def _plan(self, table: TableInfo) -> _Plan:
        plan = self._plans.get(table.name)
        if plan is None:
            self.describe(table.name)
            plan = self._plans[table.name]
        return plan

    def _where(
        self, table: TableInfo, plan: _Plan, after: Key | None, predicate: Predicate | None,
        params: list[object],
    ) -> str:
        """The WHERE clause of the rows past ``after`` that ``predicate`` selects (empty if
        none); appends its parameters to ``params``, in placeholder order."""
        keys = ", ".join(plan.key_sql)
        conditions = []
        if after is not None:
            if len(after) > 1:
                conditions.append(f"({keys}) > ({', '.join('?' for _ in after)})")
            else:
                conditions.append(f"{keys} > ?")
            params.extend(after)
        bounds = predicate.key_range if predicate is not None else None
        if bounds is not None:  # bound like the cursor: raw stored values of the column
            if bounds.lo is not None:
                conditions.append(f"{plan.key_sql[0]} > ?")
                params.append(bounds.lo)
            if bounds.hi is not None:
                conditions.append(f"{plan.key_sql[0]} <= ?")
                params.append(bounds.hi)

        # timestamp columns compare as instants (sources/timestamps.py), not as text
        instants = {c.name for c in table.columns if pa.types.is_timestamp(c.arrow_type)}

        def column(name: str) -> str:
            return sqlite_instant_sql(quote_ident(name)) if name in instants else quote_ident(name)

        def bind(name: str, value: object) -> str:
            if name in instants and isinstance(value, str):
                value = instant_text(value)
            params.append(int(value) if isinstance(value, bool) else value)
            return "?"

        conditions += render_conditions(predicate, column, bind, key_range_rendered=True)
        return f"WHERE {' AND '.join(conditions)} " if conditions else ""

    def _query(
        self, table: TableInfo, plan: _Plan, selection: _Selection, after: Key | None,
        predicate: Predicate | None, params: list[object], dummy: bool,
    ) -> str:
        """The keyset query, with the dummy row first or bare; appends its parameters but
        the LIMIT to ``params``, in placeholder order."""
        where = self._where(table, plan, after, predicate, params)
        page = (f"{', '.join(selection.selects)} FROM {quote_ident(table.name)} "
                f"{where}ORDER BY {', '.join(plan.key_sql)} LIMIT ?")
        if not dummy:
            return f"SELECT {page}"
        return (f"SELECT 1, {', '.join(selection.dummies)} UNION ALL SELECT * FROM ("
                f"SELECT 0, {page})")

    def _mismatch(
        self, table: TableInfo, plan: _Plan, after: Key | None, limit: int,
        predicate: Predicate | None,
    ) -> DataError | None:
        """What the driver's "Type mismatch" was about: the first of the ``limit`` rows
        past ``after`` (the page read) with a value its column's bare selection does not
        read (None if there is none: the page's scan only, however large the table)."""
        keys = [f"k{i}" for i in range(len(plan.key_sql))]  # aliases, not input
        aliased = ", ".join(f"{k} AS {a}" for k, a in zip(plan.key_sql, keys, strict=True))
        for name, declared, stored in plan.bare:
            params: list[object] = []
            where = self._where(table, plan, after, predicate, params)
            column = quote_ident(name)
            classes = ", ".join(f"'{c}'" for c in ("null", *stored))  # constants, not input
            page = (f"SELECT {aliased}, {column} AS v FROM {quote_ident(table.name)} "
                    f"{where}ORDER BY {', '.join(plan.key_sql)} LIMIT ?")
            try:
                row = self._catalog.execute(
                    f"SELECT {', '.join(keys)}, typeof(v), "
                    f"quote(CASE typeof(v) WHEN 'blob' THEN substr(v, 1, 20) "
                    f"ELSE substr(CAST(v AS TEXT), 1, 40) END) "
                    f"FROM ({page}) WHERE typeof(v) NOT IN ({classes}) LIMIT 1",
                    (*params, limit),
                ).fetchone()
            except sqlite3.Error:
                return None
            if row is not None:
                *key, kind, text = row
                return DataError(
                    f"cannot read table {table.name!r}: column {name!r}: a value cannot be "
                    f"read as {declared}: the row with key {tuple(key)!r} holds the {kind} "
                    f"{text} (only {' and '.join(stored)} values and NULLs can be read as "
                    f"{declared}; a --query can CAST the column)"
                )
        return None

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        plan = self._plan(table)
        fast = plan.fast is not None and table.name not in self._mixed
        while True:
            selection = plan.fast if fast and plan.fast is not None else plan.full
            try:
                for batch in self._read(table, plan, selection, after, limit, predicate,
                                        dummy=table.name in self._dummied):
                    yield batch
                    limit -= batch.num_rows
                    after = tuple(batch.column(k)[-1].as_py() for k in table.key_columns)
                return
            except _Retype:
                # the rest of the page, and every later page of this table, with the dummy
                self._dummied.add(table.name)
            except MixedStorage:
                # a number column holds text or a blob somewhere: the rest of the page,
                # and every later page of this table, with the full selection
                self._mixed.add(table.name)
                fast = False
            if limit <= 0:
                return

    def _read(
        self, table: TableInfo, plan: _Plan, selection: _Selection, after: Key | None,
        limit: int, predicate: Predicate | None, dummy: bool,
    ) -> Iterator[pa.RecordBatch]:
        values: list[object] = []
        sql = self._query(table, plan, selection, after, predicate, values, dummy)
        params = (*values, limit)
        cur = self._conn.cursor()
        try:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.execute(sql, parameters=params)
            reader = cur.fetch_record_batch()
            first = dummy
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                if first:
                    if batch.num_rows == 0 or batch.column(0)[0].as_py() != 1:
                        raise SourceError("SQLite returned rows out of the expected order")
                    batch = batch.slice(1)
                    first = False
                if batch.num_rows:
                    yield _conform(batch if dummy else _typed(batch, selection), selection,
                                   plan.schema, 1 if dummy else 0)
        # the ADBC driver reports a failed first step as its own Error, a failure while
        # streaming as an OSError from Arrow
        except (OSError, adbc_driver_manager.Error) as exc:
            if _TYPE_MISMATCH in str(exc):
                # a value past the driver's first batch of rows of another type: in a
                # number column of the fast selection, a text or a blob (read on with the
                # full one); in a bare read, perhaps only a column that began all NULL
                if selection is plan.fast:
                    raise (MixedStorage if dummy else _Retype) from None
                found = self._mismatch(table, plan, after, limit, predicate)
                if found is not None:
                    raise found from exc
                if not dummy:
                    raise _Retype from None
            raise _translate(exc, table) from exc
        finally:
            cur.close()


def _typed(batch: pa.RecordBatch, selection: _Selection) -> pa.RecordBatch:
    """A bare batch as the dummy row would have made the driver type it; :class:`_Retype`
    if a column holds values of another type.

    Two differences are the driver's alone: an all-NULL column, which it types int64, is
    NULLs of the meant type; integers where a double is meant (a number column's
    INTEGER values, typed double by the dummy's 0.0) are the doubles the driver makes of
    them (a C conversion, as an unchecked cast)."""
    if all(c.type == t for c, t in zip(batch.columns, selection.types, strict=True)):
        return batch
    arrays = []
    for column, meant in zip(batch.columns, selection.types, strict=True):
        if column.type != meant:
            if column.null_count == len(column):
                column = pa.nulls(len(column), meant)
            elif pa.types.is_int64(column.type) and pa.types.is_float64(meant):
                column = column.cast(meant, safe=False)
            else:
                raise _Retype
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _conform(batch: pa.RecordBatch, selection: _Selection, schema: pa.Schema,
             position: int) -> pa.RecordBatch:
    """Convert each selected group, from column ``position`` on (past the dummy row's
    marker column), to its declared type."""
    arrays = []
    for field, (width, convert) in zip(schema, selection.converters, strict=True):
        arrays.append(convert(batch.columns[position : position + width], field))
        position += width
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _translate(exc: Exception, table: TableInfo) -> SourceError:
    message = str(exc)
    if "locked" in message or "busy" in message:
        return SourceUnavailableError(f"SQLite database is busy: {message}")
    if "malformed JSON" in message:
        return DataError(f"table {table.name!r} holds malformed JSON in a JSON column: {message}")
    return DataError(f"cannot read table {table.name!r}: {message}")
