"""SQLite source: the catalog from PRAGMAs, rows through the ADBC SQLite driver.

SQLite is dynamically typed, so the declared type of each column decides the Arrow
type (the affinity rules of https://sqlite.org/datatype3.html plus the common names
DATE, DATETIME, TIMESTAMP, TIMESTAMPTZ, BOOLEAN, DECIMAL(p,s) and JSON; the mapping is
documented in docs/formats.md). The ADBC driver infers a batch's types from the values
it sees first, and an all-NULL first batch would be taken for int64; every query
therefore starts with one typed dummy row (dropped again) so the driver always infers
the storage class each selected expression is meant to have.

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

import re
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as adbc_sqlite
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.instants import iso_date
from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.exceptions import (
    DataError,
    NoUsableKeyError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources.base import SOURCE_TYPE, Column, TableInfo
from egress.sources.instant_filter import read_matching, split_timestamp_conditions
from egress.sources.predicate_sql import render_conditions

#: Hidden column carrying the rowid of a table without a primary key.
ROWID = "__egress_rowid"
#: Up to this many rowids the row estimate is an exact count(*) (about 10 ms per 100k
#: rows, before the first row is read); above, the largest rowid.
EXACT_COUNT_UNTIL = 200_000
#: Prefix of the hidden columns carrying the raw value of a key column.
RAW_KEY = "__egress_key_"
BATCH_ROWS = 16384

_DECIMAL = re.compile(r"^\s*(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)\s*$", re.I)
_HAS_OFFSET = r"(?:Z|[+-]\d\d:?\d\d)$"
_DATE_ONLY = r"^\d{4}-\d\d-\d\d$"
#: SQLite's storage classes, in the order of the children of :data:`DYNAMIC`.
_STORAGE_CLASSES = (
    ("integer", pa.int64(), "0"),
    ("real", pa.float64(), "0.0"),
    ("text", pa.string(), "''"),
    ("blob", pa.binary(), "x''"),
)
#: A value of any storage class: one child per class, the row's own class selected.
DYNAMIC = pa.sparse_union([pa.field(n, t) for n, t, _ in _STORAGE_CLASSES])

Convert = Callable[[list[pa.Array], pa.Field], pa.Array]


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _data_error(field: pa.Field, exc: Exception) -> DataError:
    declared = (field.metadata or {}).get(SOURCE_TYPE, b"").decode() or "untyped"
    return DataError(
        f"column {field.name!r}: a value cannot be read as {declared} ({field.type}): {exc}"
    )


def _cast(arrays: list[pa.Array], field: pa.Field, to: pa.DataType | None = None) -> pa.Array:
    """The column as ``to`` (the field's type by default); text is checked to be UTF-8
    (SQLite hands out a blob stored in a TEXT column as it is)."""
    (col,) = arrays
    to = to or field.type
    try:
        if col.type != to:
            col = pc.cast(col, to)
        if pa.types.is_string(to):
            col.validate(full=True)
        return col
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _data_error(field, exc) from exc


def _numeric(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """Text of non-REAL values, plus REAL values as the shortest text that reads back to
    the same double (SQLite's own CAST keeps only 15 digits). In a DECIMAL(p,s) column a
    REAL is rounded to the declared scale first: 3 * 12.34 is stored as
    37.019999999999996 and means 37.02."""
    text, real = arrays
    if real.null_count < len(real):
        if pa.types.is_decimal(field.type):
            real = pc.round(real, ndigits=field.type.scale)
            if text.null_count == len(text):
                # only REALs: the rounded double converts to the same decimal as its
                # text does, without making the text (checked in tests/unit)
                return _cast([real], field)
        text = pc.coalesce(text, pc.cast(real, pa.string()))
    return _cast([text], field)


def _timestamp(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """ISO 8601 text as SQLite's date functions read it: a date alone is midnight, a value
    without an offset is UTC, one with an offset is converted to UTC."""
    (text,) = arrays
    if text.null_count == len(text):
        return pa.nulls(len(text), field.type)
    try:
        # the common case, no value with an offset: one parse, read as UTC (a date alone
        # parses as midnight); a value with an offset makes the naive parse fail
        naive = pc.cast(text, pa.timestamp("us"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    else:
        return naive if naive.type == field.type else naive.cast(field.type)
    date_only = pc.match_substring_regex(text, _DATE_ONLY)
    text = pc.if_else(date_only, pc.binary_join_element_wise(text, " 00:00:00", ""), text)
    has_offset = pc.match_substring_regex(text, _HAS_OFFSET)
    text = pc.if_else(has_offset, text, pc.binary_join_element_wise(text, "Z", ""))
    utc = _cast([text], field, pa.timestamp("us", tz="UTC"))
    return utc if field.type.tz else pc.cast(utc, pa.timestamp("us"))


def _dynamic(arrays: list[pa.Array], field: pa.Field) -> pa.Array:
    """One sparse union of the four per-class columns (at most one is set per row; a NULL
    is a null integer)."""
    try:
        arrays[2].validate(full=True)  # the text child: SQLite does not check for UTF-8
    except pa.ArrowInvalid as exc:
        raise _data_error(field, exc) from exc
    codes = np.zeros(len(arrays[0]), dtype=np.int8)
    for code, array in enumerate(arrays[1:], start=1):
        if array.null_count < len(array):
            codes[pc.is_valid(array).to_numpy(zero_copy_only=False)] = code
    return pa.UnionArray.from_sparse(
        pa.array(codes, pa.int8()), arrays, field_names=[n for n, _, _ in _STORAGE_CLASSES]
    )


@dataclass(frozen=True)
class _Mapping:
    """How one declared type is selected, primed and converted."""

    arrow_type: pa.DataType
    #: (SQL expression template, dummy literal) per selected column; {c} is the column.
    selects: tuple[tuple[str, str], ...]
    convert: Convert = _cast
    logical_type: str | None = None
    #: The Arrow value is the stored value, so it can be bound back as a cursor.
    exact_key: bool = False


def _text(arrow_type: pa.DataType, convert: Convert = _cast, logical: str | None = None
          ) -> _Mapping:
    return _Mapping(arrow_type, (("CAST({c} AS TEXT)", "''"),), convert, logical)


def _split_real(arrow_type: pa.DataType, logical: str | None = None) -> _Mapping:
    selects = (
        ("CASE WHEN typeof({c}) = 'real' THEN NULL ELSE CAST({c} AS TEXT) END", "''"),
        ("CASE WHEN typeof({c}) = 'real' THEN {c} END", "0.0"),
    )
    return _Mapping(arrow_type, selects, _numeric, logical)


_DYNAMIC_MAPPING = _Mapping(
    DYNAMIC,
    tuple((f"CASE WHEN typeof({{c}}) = '{cls}' THEN {{c}} END", dummy)
          for cls, _, dummy in _STORAGE_CLASSES),
    _dynamic,
    exact_key=True,
)


def map_declared_type(declared: str) -> _Mapping:
    """Arrow type and SELECT expressions for a column's declared SQLite type."""
    t = declared.strip().upper()
    if m := _DECIMAL.match(t):
        precision, scale = int(m.group(1)), int(m.group(2) or 0)
        if 0 < precision <= 38 and scale <= precision:
            return _split_real(pa.decimal128(precision, scale))
    if "BOOL" in t:
        # numbers: non-zero is true; texts must read as a boolean ("true", "0", …)
        return _Mapping(pa.bool_(), (
            ("CASE WHEN typeof({c}) IN ('integer', 'real') THEN {c} <> 0 ELSE {c} END", "0"),
        ))
    if "INT" in t:
        return _Mapping(pa.int64(), (("{c}", "0"),), exact_key=True)
    if t in ("JSON", "JSONB"):
        return _Mapping(pa.string(), (("json({c})", "''"),), logical_type="json")
    if t == "DATE":
        return _text(pa.date32())
    if t in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATETIMETZ"):
        return _text(pa.timestamp("us", tz="UTC"), _timestamp)
    if t.startswith(("DATETIME", "TIMESTAMP")):
        return _text(pa.timestamp("us"), _timestamp)
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return _text(pa.string())
    if "BLOB" in t:
        return _Mapping(pa.binary(), (("CAST({c} AS BLOB)", "x''"),))
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return _Mapping(pa.float64(), (("{c}", "0.0"),), exact_key=True)
    if t.startswith(("DECIMAL", "NUMERIC")):
        # Unconstrained or too wide for decimal128: keep the exact text.
        return _split_real(pa.string(), "decimal")
    # No declared type, or one SQLite gives NUMERIC affinity we cannot type further.
    return _DYNAMIC_MAPPING


def path_from_url(url: str) -> Path:
    """``sqlite:///rel/path.db`` → rel/path.db; ``sqlite:////abs/path.db`` → /abs/path.db."""
    if not url.startswith("sqlite:///"):
        raise SourceError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to.db)")
    return Path(url[len("sqlite:///") :])


@dataclass(frozen=True)
class _Plan:
    """How to read one table: the selected expressions and how each output is made."""

    selects: tuple[str, ...]
    dummies: tuple[str, ...]
    #: (number of selected expressions, converter) per output and hidden column.
    converters: tuple[tuple[int, Convert], ...]
    #: The SQL expression of each key column, in key order.
    key_sql: tuple[str, ...]
    schema: pa.Schema


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

    def close(self) -> None:
        self._catalog.close()
        self._conn.close()

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
        mappings: dict[str, _Mapping] = {}
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
        selects, dummies = [], []
        converters: list[tuple[int, Convert]] = []
        for c in columns:
            m = mappings[c.name]
            selects += [sql.format(c=quote_ident(c.name)) for sql, _ in m.selects]
            dummies += [d for _, d in m.selects]
            converters.append((len(m.selects), m.convert))
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
                selects += [sql.format(c=key_sql[i]) for sql, _ in _DYNAMIC_MAPPING.selects]
                dummies += [d for _, d in _DYNAMIC_MAPPING.selects]
                converters.append((len(_DYNAMIC_MAPPING.selects), _dynamic))
        else:
            rowid = self._rowid_name(table, [c.name for c in columns])
            key_columns, key_sql = [ROWID], [rowid]
            hidden.append(pa.field(ROWID, pa.int64()))
            selects.append(rowid)
            dummies.append("0")
            converters.append((1, _cast))
        schema = pa.schema([c.field() for c in columns] + hidden)
        self._plans[table] = _Plan(tuple(selects), tuple(dummies), tuple(converters),
                                   tuple(key_sql), schema)
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

    def _query(
        self, table: TableInfo, plan: _Plan, after: Key | None, predicate: Predicate | None,
        params: list[object],
    ) -> str:
        """The keyset query; appends its parameters but the LIMIT to ``params``, in
        placeholder order."""
        keys = ", ".join(plan.key_sql)
        conditions = []
        if after is not None:
            if len(after) > 1:
                conditions.append(f"({keys}) > ({', '.join('?' for _ in after)})")
            else:
                conditions.append(f"{keys} > ?")
            params.extend(after)

        dates = {c.name for c in table.columns if pa.types.is_date(c.arrow_type)}

        def bind(column: str, value: object) -> str:
            if column in dates and isinstance(value, str):
                value = iso_date(value)  # the stored form: 2024-01-31, not 20240131
            params.append(int(value) if isinstance(value, bool) else value)
            return "?"

        conditions += render_conditions(predicate, quote_ident, bind)
        where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
        return (
            f"SELECT 1, {', '.join(plan.dummies)} UNION ALL SELECT * FROM ("
            f"SELECT 0, {', '.join(plan.selects)} FROM {quote_ident(table.name)} "
            f"{where}ORDER BY {keys} LIMIT ?)"
        )

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        in_sql, on_rows = split_timestamp_conditions(predicate, table)
        return read_matching(lambda cursor: self._read(table, cursor, limit, in_sql),
                             table, after, limit, on_rows)

    def _read(
        self, table: TableInfo, after: Key | None, limit: int, predicate: Predicate | None
    ) -> Iterator[pa.RecordBatch]:
        """Up to ``limit`` rows after ``after`` that meet ``predicate`` (all in SQL)."""
        plan = self._plan(table)
        values: list[object] = []
        sql = self._query(table, plan, after, predicate, values)
        params = (*values, limit)
        cur = self._conn.cursor()
        try:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.execute(sql, parameters=params)
            reader = cur.fetch_record_batch()
            first = True
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
                    yield _conform(batch, plan)
        # the ADBC driver reports a failed first step as its own Error, a failure while
        # streaming as an OSError from Arrow
        except (OSError, adbc_driver_manager.Error) as exc:
            raise _translate(exc, table) from exc
        finally:
            cur.close()


def _conform(batch: pa.RecordBatch, plan: _Plan) -> pa.RecordBatch:
    """Drop the marker column and convert each selected group to its declared type."""
    arrays = []
    position = 1
    for field, (width, convert) in zip(plan.schema, plan.converters, strict=True):
        arrays.append(convert(batch.columns[position : position + width], field))
        position += width
    return pa.RecordBatch.from_arrays(arrays, schema=plan.schema)


def _translate(exc: Exception, table: TableInfo) -> SourceError:
    message = str(exc)
    if "locked" in message or "busy" in message:
        return SourceUnavailableError(f"SQLite database is busy: {message}")
    if "malformed JSON" in message:
        return DataError(f"table {table.name!r} holds malformed JSON in a JSON column: {message}")
    return DataError(f"cannot read table {table.name!r}: {message}")
