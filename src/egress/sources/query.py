"""Free-form read-only queries as a source: one SELECT, paged by a key the caller names.

A query export reads ``SELECT … FROM (<query>) AS q WHERE (k1, k2) > (…) ORDER BY k1, k2
LIMIT n`` page after page (never OFFSET), so it resumes after a crash exactly like a
table export: the key must be result columns that are unique and NOT NULL. The query
text is the caller's SQL by design (the ``exports:query`` scope gates it); egress makes
it run read-only: wrapped as a subquery (only a SELECT, WITH … SELECT or VALUES parses
there), one statement only, on a read-only connection / in a READ ONLY transaction, with
a statement timeout per page.

A query source answers to one table name (the export's ``name``) and describes the
query's result like a table: the same type mapping as the source's tables.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.exceptions import ConfigError, DataError
from egress.sources.base import TableInfo

#: The default output name of a query export.
DEFAULT_NAME = "query"
MAX_QUERY_CHARS = 100_000
MAX_KEY_COLUMNS = 16
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_TRAILING = re.compile(r"[\s;]+$")
#: The first word of the query, after comments and opening parentheses.
_FIRST_WORD = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*([A-Za-z]+)", re.S)
_QUERIES = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})


@dataclass(frozen=True)
class Query:
    """What a query export reads: the SQL, its key, and the output's name."""

    sql: str
    key: tuple[str, ...]
    name: str = DEFAULT_NAME

    def to_json(self) -> dict[str, Any]:
        return {"sql": self.sql, "key": list(self.key), "name": self.name}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Query:
        return cls(sql=data["sql"], key=tuple(data["key"]), name=data.get("name") or DEFAULT_NAME)

    def digest(self) -> dict[str, Any]:
        """What the audit log keeps of the query: its SHA-256 and length, not the text."""
        return {"query_sha256": hashlib.sha256(self.sql.encode()).hexdigest(),
                "query_length": len(self.sql)}


class QueryCatalog:
    """The catalog of a query source: one "table", the query's result, described once.
    Subclasses set ``query`` and ``_info = None`` and implement ``_describe``."""

    #: A query's result is paged by its own key, never COPY'd (the postgres CSV dialect).
    server_csv = False

    query: Query
    _info: TableInfo | None

    def tables(self) -> list[str]:
        return [self.query.name]

    def describe(self, table: str) -> TableInfo:
        if table != self.query.name:
            raise ConfigError(f"this query export reads {self.query.name!r}, not {table!r}")
        if self._info is None:
            self._info = self._describe()
        return self._info

    def _describe(self) -> TableInfo:
        raise NotImplementedError

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Up to ``limit`` rows of the result after ``after``, checked on the way: the key
        must be unique and NOT NULL (one row more is read to see a duplicate at the end)."""
        if predicate is not None:
            raise ConfigError("a query export takes no filters: put them in the query")
        self.describe(table.name)
        return checked_page(self._result_page(table, after, limit + 1), table.key_columns,
                            limit, self.query)

    def _result_page(self, table: TableInfo, after: Key | None, limit: int
                     ) -> Iterator[pa.RecordBatch]:
        """The dialect's keyset page of the query's result."""
        raise NotImplementedError


def check_query(sql: Any, key: Any, name: Any = None) -> Query:
    """The checked query (shape only; the source checks it against the database)."""
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError("query must be one SELECT statement (a non-empty string)")
    if len(sql) > MAX_QUERY_CHARS:
        raise ConfigError(f"query is longer than {MAX_QUERY_CHARS} characters")
    if "\x00" in sql:
        raise ConfigError("query may not contain a NUL character")
    # one statement: a trailing ';' is harmless and dropped; any other ';' is refused
    # later by the database (the query runs as a subquery)
    sql = _TRAILING.sub("", sql.strip())
    first = _FIRST_WORD.match(sql)
    word = first.group(1).upper() if first else ""
    if word not in _QUERIES:
        raise ConfigError(
            f"a query export runs one read-only query (SELECT, WITH … SELECT or VALUES); "
            f"{word + ' statements are' if word else 'this is'} not allowed"
        )
    if isinstance(key, str):
        key = [key]
    if not isinstance(key, list | tuple) or not key:
        raise ConfigError(
            "a query export needs `key`: the result column(s) that are unique and NOT NULL "
            "(e.g. [\"id\"]), by which egress pages the result and resumes it"
        )
    if len(key) > MAX_KEY_COLUMNS or not all(isinstance(k, str) and k for k in key):
        raise ConfigError(f"key must list 1–{MAX_KEY_COLUMNS} result column names")
    if len(set(key)) != len(key):
        raise ConfigError(f"key lists a column twice: {list(key)}")
    name = DEFAULT_NAME if name is None else name
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"bad query export name {name!r}: use 1–128 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (it names the output file)"
        )
    return Query(sql=sql, key=tuple(key), name=name)


def check_result_columns(names: list[str], query: Query, dialect: str) -> None:
    """Result columns must be unique (an output needs distinct names) and hold the key."""
    seen: set[str] = set()
    for n in names:
        # SQLite renames the second of two equal names in a subquery to "name:1"
        base = re.sub(r":\d+$", "", n) if dialect == "sqlite" else n
        if n in seen or (base != n and base in names):
            raise ConfigError(
                f"the query returns column {base!r} more than once; give each result "
                "column its own name (… AS other_name)"
            )
        seen.add(n)
    missing = [k for k in query.key if k not in names]
    if missing:
        raise ConfigError(
            f"key column(s) {', '.join(map(repr, missing))} are not columns of the query's "
            f"result; result columns: {', '.join(names)}"
        )


def timeout_error(query: Query, seconds: float) -> DataError:
    return DataError(
        f"query export {query.name!r}: the query ran longer than {seconds:g} s "
        "(export.query_timeout_seconds) for one page and was cancelled; make it cheaper "
        "(an index on the key helps: each page is ORDER BY key LIMIT n) or raise the timeout"
    )


def checked_page(
    batches: Iterable[pa.RecordBatch], key_columns: tuple[str, ...], limit: int,
    query: Query,
) -> Iterator[pa.RecordBatch]:
    """Up to ``limit`` rows of ``batches`` (read with ``limit + 1``), each key NOT NULL and
    each different from the row before it (rows come in key order: equal neighbours mean
    the key is not unique, and paging past them would lose rows). The row past ``limit``
    is only compared with the last one, so a duplicate across pages is caught too."""
    try:
        yield from _checked(batches, key_columns, limit, query)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # end the page's statement (and transaction) now, not when collected


def _checked(
    batches: Iterable[pa.RecordBatch], key_columns: tuple[str, ...], limit: int,
    query: Query,
) -> Iterator[pa.RecordBatch]:
    rows = 0
    last: tuple[Any, ...] | None = None  # key of the row before this batch
    for batch in batches:
        if batch.num_rows == 0:
            continue
        # key_columns may be hidden raw-value columns: messages name the query's key
        for name, shown in zip(key_columns, query.key, strict=True):
            column = batch.column(name)
            # a union (SQLite's storage classes) counts no nulls of its own: ask each row
            if column.null_count or (pa.types.is_union(column.type)
                                     and pc.any(pc.is_null(column)).as_py()):
                raise DataError(
                    f"query export {query.name!r}: key column {shown!r} is NULL in a row; "
                    "the key must be NOT NULL (filter those rows out or choose another key)"
                )
        first = tuple(batch.column(k)[0].as_py() for k in key_columns)
        if last is not None and first == last:
            raise _not_unique(query, key_columns, first)
        _check_unique(batch, key_columns, query)
        last = tuple(batch.column(k)[-1].as_py() for k in key_columns)
        take = min(batch.num_rows, limit - rows)
        if take > 0:
            rows += take
            yield batch if take == batch.num_rows else batch.slice(0, take)


def _not_unique(query: Query, key_columns: tuple[str, ...], value: tuple[Any, ...]) -> DataError:
    shown = value[0] if len(value) == 1 else value
    return DataError(
        f"query export {query.name!r}: the key ({', '.join(query.key)}) is not unique: "
        f"two rows have {shown!r}; the key must be result columns that are unique and "
        "NOT NULL (egress pages the result by it)"
    )


def _check_unique(batch: pa.RecordBatch, key_columns: tuple[str, ...], query: Query) -> None:
    """Equal neighbours within ``batch`` (compared by Arrow; by value for a union of
    SQLite storage classes, where 1 = 1.0 as in SQLite)."""
    if batch.num_rows < 2:
        return
    same: pa.Array | None = None
    for name in key_columns:
        column = batch.column(name)
        try:
            eq = pc.equal(column.slice(1), column.slice(0, len(column) - 1))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            values = column.to_pylist()
            eq = pa.array([a == b for a, b in zip(values[1:], values, strict=False)],
                          pa.bool_())
        same = eq if same is None else pc.and_(same, eq)
    if same is not None and pc.any(same).as_py():
        at = pc.index(same, True).as_py()
        raise _not_unique(query, key_columns,
                          tuple(batch.column(k)[at].as_py() for k in key_columns))
