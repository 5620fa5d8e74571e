"""PostgreSQL source: the catalog and the rows through the ADBC PostgreSQL driver.

Tables are named as the search path shows them (``events``) or schema-qualified
(``audit.events``). Rows are read by keyset pagination over the primary key (or a
unique index over NOT NULL columns): ``WHERE (k1, k2) > (…) ORDER BY k1, k2 LIMIT n``,
each ``read`` in its own read-only REPEATABLE READ transaction. Cursor values are bound
as text and cast to the key column's own type, so uuid, timestamp and text keys compare
as PostgreSQL compares them. Type mapping: :mod:`egress.sources.pg_types`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import adbc_driver_manager
import adbc_driver_postgresql.dbapi as adbc_pg
import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.exceptions import (
    DataError,
    EgressError,
    NoUsableKeyError,
    PermissionDeniedError,
    SourceError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.redact import redact_url, scrub, url_secrets
from egress.sources import pg_catalog as catalog
from egress.sources.base import Column, TableInfo
from egress.sources.pg_errors import connect_error, libpq_url, sqlstate_transient
from egress.sources.pg_keyset import ReadPlan, keyset_query, quote_ident, quote_literal
from egress.sources.pg_snapshot import LOST_SQLSTATES, set_snapshot_sql, snapshot_lost
from egress.sources.pg_split import key_at_rows, split_points
from egress.sources.pg_types import (
    PgMapping,
    conform,
    key_text,
    map_type,
)

if TYPE_CHECKING:
    from egress.sources.pg_copy import CsvCopy

log = logging.getLogger(__name__)

#: Batches handed to the engine hold at most this many rows (slices, no copies).
BATCH_ROWS = 65536
#: The driver ends a batch once it holds about this many bytes (its default: 16 MiB).
#: Batches wait in the read-ahead's queue and a slice keeps its whole batch alive, so
#: smaller ones hold less in flight: at 5M rows a CSV export peaked at 216-242 MB with
#: the default and 176-181 MB with 4 MiB, at the same CPU (docs/benchmarks.md).
BATCH_HINT_BYTES = 4 * 1024 * 1024
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
#: A type's length/precision (``varchar(20)``, ``numeric(10,2)``, ``timestamp(3)``).
@dataclass(frozen=True)
class _Relation:
    oid: int
    schema: str
    name: str


class PostgresSource:
    dialect = "postgresql"
    #: Write the cursor into a table's keyset query (no parameters: a COPY stream).
    inline_cursor = True
    #: ``copy_csv`` streams the server's own CSV of a table (the postgres CSV dialect).
    server_csv = True

    def __init__(self, url: str) -> None:
        self._url = libpq_url(url)
        self._secrets = url_secrets(self._url)
        #: catalog queries and split planning (ADBC, autocommit; apart from the reads,
        #: which run on the read-ahead's thread)
        self._catalog: Any = None
        #: the connection of ``copy_csv`` streams (psycopg, opened on first use: only
        #: the postgres CSV dialect imports psycopg, ~14 MB and 0.1 s of start-up)
        self._copier: Any = None
        self._conn: Any = None
        #: Marks the read() whose transaction is open on the ADBC connection.
        self._reader: object | None = None
        self._plans: dict[str, ReadPlan] = {}
        #: each page's statement is cancelled past this (ms; 0: never): source protection
        self._page_timeout_ms = 0
        #: ``SET TRANSACTION SNAPSHOT …`` of every read, and who holds it (use_snapshot)
        self._snapshot: tuple[str, str, str | None] | None = None
        #: an ADBC connection serves one statement at a time; the read-ahead's thread may
        #: ask the catalog too (a table dropped under a read lists the tables left)
        self._catalog_lock = threading.RLock()
        # both connections wait on the server (a backend starts, the driver loads the
        # types, ~50 ms each): the read connection opens on a thread meanwhile
        with ThreadPoolExecutor(1, thread_name_prefix="egress-pg-connect") as pool:
            reads = pool.submit(self._open_adbc)
            try:
                self._catalog_conn()
            except BaseException:
                with contextlib.suppress(BaseException):  # the catalog's error is raised
                    _close_quietly(reads.result())
                raise
        try:
            self._conn = reads.result()
        except BaseException:
            self.close()
            raise

    # --- connections ------------------------------------------------------------------

    def _scrub(self, message: str) -> str:
        return scrub(message, self._secrets)

    def _lines(self, exc: Exception) -> list[str]:
        """A driver error's message lines without secrets; its type's name if it has none."""
        return self._scrub(str(exc)).strip().splitlines() or [type(exc).__name__]

    def _unavailable(self, exc: Exception) -> SourceError:
        return connect_error(redact_url(self._url), getattr(exc, "sqlstate", None),
                             self._lines(exc)[0])

    def _catalog_conn(self) -> Any:
        with self._catalog_lock:
            if self._catalog is None:
                try:
                    self._catalog = adbc_pg.connect(self._url, autocommit=True)
                except adbc_driver_manager.Error as exc:
                    raise self._unavailable(exc) from None
            return self._catalog

    def _drop_catalog(self) -> None:
        with self._catalog_lock:
            conn, self._catalog = self._catalog, None
        _close_quietly(conn)

    def _adbc_conn(self) -> Any:
        if self._conn is None:
            self._conn = self._open_adbc()
        return self._conn

    def _open_adbc(self) -> Any:
        # its own ADBC database: an adbc_clone of the catalog's saved ~45 ms of
        # start-up, but then a source restart between paced pages raised nothing (the
        # next page reconnected), which tests/acceptance/test_restarts.py refuses
        try:
            conn = adbc_pg.connect(self._url, autocommit=True)
        except adbc_driver_manager.Error as exc:
            raise self._unavailable(exc) from None
        try:
            with contextlib.closing(conn.cursor()) as cur:
                for statement in self._read_session_settings():
                    cur.execute(statement)
        except adbc_driver_manager.Error as exc:
            conn.close()
            raise self._unavailable(exc) from None
        return conn

    def _read_session_settings(self) -> tuple[str, ...]:
        """What every new read connection runs first (a subclass adds to it: it may run
        on the thread that opens the connection during ``__init__``)."""
        return SESSION_SETTINGS

    def _drop_adbc(self) -> None:
        conn, self._conn, self._reader = self._conn, None, None
        _close_quietly(conn)

    def set_statement_timeout(self, seconds: float) -> None:
        """Cancel a page's query that runs longer than ``seconds`` (0: never)."""
        self._page_timeout_ms = max(0, round(seconds * 1000))

    def use_snapshot(self, snapshot_id: str, coordinator: str | None = None) -> None:
        """Read every page in the exported snapshot ``snapshot_id``, held by the session of
        ``coordinator`` (sources/pg_snapshot.py); a snapshot that is gone fails the read
        with SnapshotLostError, never a read of another snapshot."""
        self._snapshot = (snapshot_id, set_snapshot_sql(snapshot_id), coordinator)

    def close(self) -> None:
        self._drop_adbc()
        self._drop_copier()
        self._drop_catalog()

    def _copier_conn(self) -> Any:
        import psycopg

        if self._copier is None or self._copier.closed or self._copier.broken:
            try:
                conn = psycopg.connect(self._url, autocommit=True)
            except psycopg.Error as exc:
                raise self._unavailable(exc) from None
            try:
                # the dialect's text forms (docs/formats.md); the key's index, never a sort
                for statement in (*SESSION_SETTINGS, "SET client_encoding = 'UTF8'",
                                  "SET enable_sort = off"):
                    conn.execute(statement)
            except psycopg.Error as exc:
                conn.close()
                raise self._unavailable(exc) from None
            self._copier = conn
        return self._copier

    def _drop_copier(self) -> None:
        conn, self._copier = self._copier, None
        _close_quietly(conn)

    def copy_csv(
        self, table: TableInfo, after: Key | None, columns: list[str], delimiter: str = ","
    ) -> CsvCopy:
        """The server's own CSV of ``columns`` of the rows after ``after``, in key order
        (the ``postgres`` CSV dialect): a running COPY whose ``take(n)`` reads rows."""
        import psycopg

        from egress.sources.pg_copy import CopyFailed, CsvCopy, copy_query

        if table.name not in self._plans:
            self.describe(table.name)
        plan = self._plans[table.name]
        query = copy_query(plan, table.key_columns, columns, after, delimiter, self._literal)

        def translate(exc: CopyFailed) -> EgressError:
            copier = self._copier
            if exc.sqlstate is None and (copier is None or copier.broken
                                         or copier.pgconn.status != psycopg.pq.ConnStatus.OK):
                self._drop_copier()
                return self._unavailable(exc)
            return self._translate(exc, exc.sqlstate, table.name)

        try:
            return CsvCopy(self._copier_conn(), query, translate)
        except psycopg.Error as exc:
            self._drop_copier()
            raise self._translate(exc, getattr(exc, "sqlstate", None), table.name) from None

    def _fetch(self, query: str, params: tuple[Any, ...] | None = None
               ) -> list[tuple[Any, ...]]:
        with self._catalog_lock:
            for _ in range(2):
                reused = self._catalog is not None
                cur = self._catalog_conn().cursor()
                try:
                    cur.execute(query, parameters=params)
                    return cur.fetchall()
                except (adbc_driver_manager.Error, OSError) as exc:
                    error, dropped = self._catalog_failure(exc, None)
                    if not (reused and dropped):
                        raise error from None
                    # the idle connection was gone (ended by the server, a pooler, a
                    # timeout): the query reads only, so once more on a new one
                finally:
                    with contextlib.suppress(Exception):
                        cur.close()
            raise error from None

    def _catalog_failure(self, exc: Exception, table: str | None
                         ) -> tuple[EgressError, bool]:
        """A catalog query failed: its error, and whether its connection broke and was
        dropped (the next query opens another)."""
        sqlstate = getattr(exc, "sqlstate", None)
        error = self._translate(exc, sqlstate, table)
        broken = isinstance(error, SourceUnavailableError) or sqlstate is None
        if broken:
            self._drop_catalog()
        return error, broken

    # --- catalog ----------------------------------------------------------------------

    def _relations(self) -> tuple[dict[str, _Relation], list[str]]:
        """Every name a table can be asked by, and the names ``tables()`` lists."""
        names: dict[str, _Relation] = {}
        listed: list[str] = []
        for oid, schema, rel, visible, is_partition in self._fetch(catalog.TABLES_SQL):
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
        (allowed,) = self._fetch(catalog.PRIVILEGE_SQL, (relation.oid,))[0]
        if not allowed:
            raise PermissionDeniedError(
                f"permission denied: the PostgreSQL user may not SELECT from table {table!r}; "
                f"grant it with GRANT SELECT ON {quote_ident(relation.schema)}."
                f"{quote_ident(relation.name)} TO <user>"
            )
        columns, mappings, by_attnum, types = [], [], {}, {}
        for (attnum, name, declared, notnull, ndims, typmod, *pg_type) in self._fetch(
            catalog.COLUMNS_SQL, (relation.oid,)
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
        self._plans[table] = ReadPlan(
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
            pg_type = list(self._fetch(catalog.TYPE_SQL, (base,))[0])
        return "text", None, -1

    def _choose_key(
        self, table: str, oid: int, by_attnum: dict[int, tuple[str, bool, PgMapping]]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(primary key, key columns): the primary key, else the narrowest unique index
        whose columns are all NOT NULL."""
        primary: tuple[str, ...] = ()
        for is_primary, _index, attnums in self._fetch(catalog.KEYS_SQL, (oid,)):
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
        size, reltuples, never_analyzed = self._fetch(catalog.SIZE_SQL, (relation.oid,))[0]
        if size <= EXACT_COUNT_BYTES:
            query = (f"SELECT count(*) FROM {quote_ident(relation.schema)}."
                     f"{quote_ident(relation.name)}")
            return int(self._fetch(query)[0][0])
        return None if never_analyzed else int(reltuples)

    def split_points(self, table: TableInfo, count: int) -> list[str]:
        """Boundaries of ``count`` key ranges of ``table`` with about equal rows: values
        of its first key column as text (engine/split.py; sources/pg_split.py)."""
        plan = self._plans.get(table.name)
        if plan is None:
            self.describe(table.name)
            plan = self._plans[table.name]
        try:
            with self._catalog_lock:
                return split_points(
                    self._catalog_conn(), SESSION_SETTINGS, plan.qualified,
                    quote_ident(table.key_columns[0]), table.row_estimate, count,
                    self._snapshot[1] if self._snapshot else None)
        except (adbc_driver_manager.Error, OSError) as exc:
            raise self._planning_error(exc, table) from None

    def key_at_rows(self, table: TableInfo,
                    ends_of: Callable[[int], list[int]]) -> tuple[int, list[str]]:
        """Rows of ``table`` and the values of its key at the row numbers
        ``ends_of(rows)`` (a stitched split: engine/stitch.py)."""
        plan = self._plans.get(table.name)
        if plan is None:
            self.describe(table.name)
            plan = self._plans[table.name]
        try:
            with self._catalog_lock:
                return key_at_rows(
                    self._catalog_conn(), SESSION_SETTINGS, plan.qualified,
                    quote_ident(table.key_columns[0]), ends_of,
                    self._snapshot[1] if self._snapshot else None)
        except (adbc_driver_manager.Error, OSError) as exc:
            raise self._planning_error(exc, table) from None

    def _planning_error(self, exc: Exception, table: TableInfo) -> EgressError:
        """A split's planning read failed: in a snapshot that is gone, the snapshot's
        error (as a page read's), else the server's words."""
        sqlstate = getattr(exc, "sqlstate", None)
        if self._snapshot is not None and sqlstate in LOST_SQLSTATES:
            snapshot_id, _, coordinator = self._snapshot
            return snapshot_lost(snapshot_id, coordinator, self._lines(exc)[0])
        return self._catalog_failure(exc, table.name)[0]

    # --- rows -------------------------------------------------------------------------

    def _literal(self, text: str) -> str:
        """``text`` as a quoted SQL string literal."""
        return quote_literal(text)

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
        # cursor is then written into the query, as quoted literals: it comes
        # from the table itself; user values (filters) stay bound parameters.
        # a key range alone (a split table's range task) keeps the fast path: its bounds
        # are values of the table, like the cursor
        unfiltered = predicate is None or not predicate.conditions
        literal = self._literal if unfiltered and self.inline_cursor else None
        query = keyset_query(table, plan, after, limit, predicate, filter_values, literal)
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
            if self._snapshot is not None:  # first after BEGIN, as PostgreSQL requires
                self._import_snapshot(cur)
            if self._page_timeout_ms:  # an int of ours, not user text
                cur.execute(f"SET LOCAL statement_timeout = {int(self._page_timeout_ms)}")
            cur.adbc_statement.set_options(
                **{"adbc.postgresql.batch_size_hint_bytes": str(BATCH_HINT_BYTES)})
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
        except OSError as exc:
            # an error inside the Arrow stream (after the first batch) carries no SQLSTATE:
            # whether the connection survived it tells a lost server from a bad row
            if self._connection_lost(cur):
                self._drop_adbc()
                raise self._unavailable(exc) from None
            raise self._translate(exc, None, table.name) from None
        finally:
            with contextlib.suppress(adbc_driver_manager.Error):
                cur.close()
            if self._reader is token:
                self._end_transaction()

    def _import_snapshot(self, cur: Any) -> None:
        assert self._snapshot is not None
        snapshot_id, statement, coordinator = self._snapshot
        try:
            cur.execute(statement)
        except adbc_driver_manager.Error as exc:
            if getattr(exc, "sqlstate", None) not in LOST_SQLSTATES:
                raise  # a lost connection, …: translated as any read's error
            lines = self._lines(exc)
            detail = next((ln for ln in lines if "ERROR:" in ln), lines[0])
            raise snapshot_lost(snapshot_id, coordinator,
                                detail.split("ERROR:", 1)[-1].strip()) from None

    @staticmethod
    def _connection_lost(cur: Any) -> bool:
        """Probe the ADBC connection after a stream error: a failed transaction still
        answers (25P02, "current transaction is aborted"); a lost connection does not."""
        try:
            cur.execute("SELECT 1")
            cur.fetchall()
        except adbc_driver_manager.Error as probe:
            return getattr(probe, "sqlstate", None) != "25P02"
        except OSError:
            return True
        return False

    def _end_transaction(self) -> None:
        self._reader = None
        if self._conn is None:
            return
        try:
            cur = self._conn.cursor()
            cur.execute("ROLLBACK")  # read only: nothing to commit
            cur.close()
        except adbc_driver_manager.Error as exc:
            # the page's rows had all arrived, so they stand; the next page opens a new
            # session (a connection whose transaction state is unknown is not reused)
            log.warning("could not end a read transaction on PostgreSQL (%s); its "
                        "connection is closed and the next page opens a new one",
                        self._lines(exc)[0])
            self._drop_adbc()

    def _translate(self, exc: Exception, sqlstate: str | None, table: str | None
                   ) -> EgressError:
        # the server's message line, without the driver's prefixes and the query text
        lines = self._lines(exc)
        detail = next((ln for ln in lines if "ERROR:" in ln or "FATAL:" in ln), lines[0])
        detail = detail.split("ERROR:", 1)[-1].split("FATAL:", 1)[-1].strip()
        what = f"table {table!r}" if table else "the PostgreSQL catalog"
        if sqlstate == "42501":
            return PermissionDeniedError(f"permission denied reading {what}: {detail}")
        if sqlstate == "57014" and self._page_timeout_ms and "statement timeout" in detail:
            return SourceUnavailableError(
                f"a page of {what} ran longer than the source's statement_timeout_seconds "
                f"({self._page_timeout_ms / 1000:g} s) and was cancelled; retried later")
        if sqlstate == "42P01" and table:
            return TableNotFoundError(table, self._relations()[1])
        lost = sqlstate is None and _operational(exc)
        if lost or sqlstate_transient(sqlstate):
            return self._unavailable(exc)
        if sqlstate and sqlstate.startswith("22"):
            return DataError(f"cannot read {what}: {detail}")
        return SourceError(f"cannot read {what}: {detail} (SQLSTATE {sqlstate or 'unknown'})")


def _operational(exc: Exception) -> bool:
    """A driver's "the connection failed" error (ADBC's, or psycopg's from a COPY stream
    of the postgres CSV dialect: psycopg is imported only by that)."""
    if isinstance(exc, adbc_driver_manager.OperationalError):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.OperationalError)


def _shape_error(column: Column) -> DataError:
    return DataError(
        f"column {column.name!r} ({column.source_type}) holds an array that is "
        "multi-dimensional or does not start at index 1, which an Arrow list cannot hold; "
        "declare the column with its dimensions (e.g. integer[][]) so egress exports it as text"
    )


def _close_quietly(conn: Any) -> None:
    """Close a connection that may already be broken: nothing it raises matters now."""
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()
