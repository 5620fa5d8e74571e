"""SQLite source: the catalog from PRAGMAs, rows through the ADBC SQLite driver.

SQLite is dynamically typed, so the declared type of each column decides the Arrow
type (the affinity rules of https://sqlite.org/datatype3.html plus the common names
DATE, DATETIME, TIMESTAMP, BOOLEAN, DECIMAL(p,s) and JSON). The ADBC driver infers a
batch's types from the values it sees first, and an all-NULL first batch would be taken
for int64; every query therefore starts with one typed dummy row (dropped again) so the
driver always infers the declared storage class.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import adbc_driver_sqlite.dbapi as adbc_sqlite
import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.keys import Key
from egress.exceptions import (
    DataError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources.base import Column, TableInfo

ROWID = "__egress_rowid"
BATCH_ROWS = 16384

_DECIMAL = re.compile(r"^\s*(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)\s*$", re.I)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Mapping:
    """How one declared type is selected, primed and converted."""

    arrow_type: pa.DataType
    select: str  # SQL expression template, {c} is the quoted column
    dummy: str  # SQL literal of the dummy row, of the storage class the driver must infer
    logical_type: str | None = None


def map_declared_type(declared: str) -> _Mapping:
    """Arrow type and SELECT expression for a column's declared SQLite type."""
    t = declared.strip().upper()
    if m := _DECIMAL.match(t):
        precision, scale = int(m.group(1)), int(m.group(2) or 0)
        if precision <= 38:
            return _Mapping(pa.decimal128(precision, scale), "CAST({c} AS TEXT)", "''")
    if "BOOL" in t:
        return _Mapping(pa.bool_(), "{c}", "0")
    if "INT" in t:
        return _Mapping(pa.int64(), "{c}", "0")
    if t in ("JSON", "JSONB"):
        return _Mapping(pa.string(), "json({c})", "''", logical_type="json")
    if t == "DATE":
        return _Mapping(pa.date32(), "CAST({c} AS TEXT)", "''")
    if t in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATETIMETZ"):
        return _Mapping(pa.timestamp("us", tz="UTC"), "CAST({c} AS TEXT)", "''")
    if t.startswith(("DATETIME", "TIMESTAMP")):
        return _Mapping(pa.timestamp("us"), "CAST({c} AS TEXT)", "''")
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return _Mapping(pa.string(), "CAST({c} AS TEXT)", "''")
    if "BLOB" in t:
        return _Mapping(pa.binary(), "CAST({c} AS BLOB)", "x''")
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return _Mapping(pa.float64(), "{c}", "0.0")
    if t.startswith(("DECIMAL", "NUMERIC")):
        # Unconstrained or too wide for decimal128: keep the exact text.
        return _Mapping(pa.string(), "CAST({c} AS TEXT)", "''", logical_type="decimal")
    # No declared type, or one SQLite gives NUMERIC affinity we cannot type further.
    return _Mapping(pa.string(), "CAST({c} AS TEXT)", "''")


def path_from_url(url: str) -> Path:
    """``sqlite:///rel/path.db`` → rel/path.db; ``sqlite:////abs/path.db`` → /abs/path.db."""
    if not url.startswith("sqlite:///"):
        raise SourceError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to.db)")
    return Path(url[len("sqlite:///") :])


class SqliteSource:
    dialect = "sqlite"

    def __init__(self, url: str) -> None:
        self.path = path_from_url(url)
        if not self.path.is_file():
            raise SourceUnavailableError(f"cannot open SQLite database {self.path}: no such file")
        uri = f"file:{self.path.resolve()}?mode=ro"
        try:
            self._catalog = sqlite3.connect(uri, uri=True)
            self._catalog.execute("SELECT count(*) FROM sqlite_master").fetchone()
            self._conn = adbc_sqlite.connect(uri)
        except (sqlite3.Error, OSError) as exc:
            raise SourceUnavailableError(f"cannot open SQLite database {self.path}: {exc}") from exc
        self._mappings: dict[str, list[_Mapping]] = {}

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
        columns, mappings, pk = [], [], []
        for _cid, name, declared, notnull, _default, pk_pos in info:
            mapping = map_declared_type(declared or "")
            mappings.append(mapping)
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
        hidden: tuple[str, ...] = ()
        key = primary_key
        if not key:
            key, hidden = (ROWID,), (ROWID,)
        self._mappings[table] = mappings
        (estimate,) = self._catalog.execute(f"SELECT count(*) FROM {quote_ident(table)}").fetchone()
        return TableInfo(
            name=table,
            columns=tuple(columns),
            key_columns=key,
            hidden_columns=hidden,
            row_estimate=int(estimate),
            primary_key=primary_key,
        )

    def _query(self, table: TableInfo, after: Key | None) -> str:
        mappings = self._mappings.get(table.name)
        if mappings is None:
            self.describe(table.name)
            mappings = self._mappings[table.name]
        selects = [m.select.format(c=quote_ident(c.name)) for c, m in zip(table.columns, mappings)]
        dummies = [m.dummy for m in mappings]
        if table.hidden_columns:
            selects.append(f"rowid AS {ROWID}")
            dummies.append("0")
        keys = ", ".join(quote_ident(k) if k != ROWID else "rowid" for k in table.key_columns)
        where = ""
        if after is not None:
            marks = ", ".join("?" for _ in after)
            where = f"WHERE ({keys}) > ({marks}) " if len(after) > 1 else f"WHERE {keys} > ? "
        return (
            f"SELECT 1, {', '.join(dummies)} UNION ALL SELECT * FROM ("
            f"SELECT 0, {', '.join(selects)} FROM {quote_ident(table.name)} "
            f"{where}ORDER BY {keys} LIMIT ?)"
        )

    def read(self, table: TableInfo, after: Key | None, limit: int) -> Iterator[pa.RecordBatch]:
        sql = self._query(table, after)
        params = (*(after or ()), limit)
        target = pa.schema(
            [c.field() for c in table.columns] + [pa.field(h, pa.int64()) for h in table.hidden_columns]
        )
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
                    yield _conform(batch, target)
        except OSError as exc:  # the ADBC driver reports SQLite errors as OSError subclasses
            raise _translate(exc, table) from exc
        finally:
            cur.close()


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Drop the marker column and cast each column to its declared Arrow type."""
    arrays = []
    for i, field in enumerate(target):
        col = batch.column(i + 1)
        if col.type != field.type:
            try:
                col = pc.cast(col, field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise DataError(
                    f"column {field.name!r}: a value cannot be read as "
                    f"{field.metadata.get(b'egress.source_type', b'?').decode() or 'text'} "
                    f"({field.type}): {exc}"
                ) from exc
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _translate(exc: OSError, table: TableInfo) -> SourceError:
    message = str(exc)
    if "locked" in message or "busy" in message:
        return SourceUnavailableError(f"SQLite database is busy: {message}")
    if "malformed JSON" in message:
        return DataError(f"table {table.name!r} holds malformed JSON in a JSON column: {message}")
    return DataError(f"cannot read table {table.name!r}: {message}")
