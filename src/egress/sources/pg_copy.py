"""PostgreSQL's own CSV: one ``COPY (SELECT …) TO STDOUT (FORMAT csv)`` per slice, read
row by row through libpq (the ``postgres`` CSV dialect, docs/formats.md).

The server sends one CopyData message per row, so counting messages counts rows and a
part can end after exactly ``part_rows`` rows without parsing the CSV. Rows are read
by ``PGconn.get_copy_data`` (libpq's ``PQgetCopyData``, GIL released while it waits) in
a tight loop and appended to one buffer per part: a row's bytes object dies young and
its memory is reused (keeping every row of a part alive until the part is joined cost
~1 s of CPU per 1M rows in page faults on the benchmark machine).

The stream runs in its own REPEATABLE READ READ ONLY transaction on a connection of its
own. Closing it before the end cancels the COPY, drains what the server had already sent
and rolls back, so the connection serves the next stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq

from egress.domain.keys import Key
from egress.exceptions import EgressError, SourceError
from egress.sources.pg_keyset import ReadPlan, quote_ident
from egress.sources.pg_types import key_text


@dataclass
class CopiedRows:
    """Rows taken from the stream: their bytes, count, and first and last row."""

    data: bytes
    rows: int
    first: bytes | memoryview | None
    last: bytes | memoryview | None
    #: the COPY ended: no row after these
    ended: bool


class CsvCopy:
    """One running ``COPY … TO STDOUT``; ``take(n)`` reads its next ``n`` rows."""

    def __init__(
        self, conn: psycopg.Connection[Any], query: str,
        translate: Callable[[CopyFailed], EgressError],
    ) -> None:
        self._conn = conn
        self._pgconn = conn.pgconn
        self._translate = translate
        self.ended = False
        self.rows = 0
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._pgconn.send_query(query.encode())
        result = self._pgconn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_OUT:
            self.ended = True
            error = CopyFailed(_error_of(result), _sqlstate_of(result))
            with contextlib.suppress(Exception):
                self._drain_results()
                self._rollback()
            raise translate(error) from None

    def take(self, n: int) -> CopiedRows:
        """The next ``n`` rows (fewer only where the COPY ends)."""
        if self.ended or n <= 0:
            return CopiedRows(b"", 0, None, None, self.ended)
        get = self._pgconn.get_copy_data
        try:
            nbytes, first = get(0)
            if nbytes <= 0:
                self._end(nbytes)
                return CopiedRows(b"", 0, None, None, True)
            # Each row is appended to one growing buffer and its object (a memoryview of
            # libpq's copy) dies at once: no per-row objects are kept, and the buffer
            # grows by realloc (glibc moves large blocks with mremap). Joining lists of
            # rows instead cost ~0.4 µs a row more, mostly in page faults
            # (docs/benchmarks.md, session 20).
            buffer = bytearray(first)
            last, got = first, n
            for i in range(1, n):
                nbytes, data = get(0)
                if nbytes <= 0:
                    got = i
                    self._end(nbytes)
                    break
                buffer += data
                last = data
        except psycopg.Error as exc:  # the connection broke (psycopg raises on -2)
            self.ended = True
            raise self._translate(CopyFailed(
                str(exc).strip().splitlines()[0] if str(exc).strip() else
                type(exc).__name__, getattr(exc, "sqlstate", None))) from None
        self.rows += got
        return CopiedRows(bytes(buffer), got, first, last, self.ended)

    def _end(self, nbytes: int) -> None:
        self.ended = True
        result = self._pgconn.get_result()
        error = None
        if nbytes < -1 or result is None or result.status != pq.ExecStatus.COMMAND_OK:
            error = (_error_of(result) or str(self._pgconn.get_error_message()),
                     _sqlstate_of(result))
        with contextlib.suppress(Exception):
            self._drain_results()
            self._rollback()
        if error is not None:
            raise self._translate(CopyFailed(*error)) from None

    def close(self) -> None:
        """Stop the COPY (cancelled if it has not ended) and end its transaction."""
        if self.ended:
            return
        self.ended = True
        with contextlib.suppress(Exception):
            self._pgconn.get_cancel().cancel()
        with contextlib.suppress(Exception):
            while self._pgconn.get_copy_data(0)[0] > 0:
                pass  # what the server sent before the cancel arrived
            self._drain_results()
        with contextlib.suppress(Exception):
            self._rollback()

    def _drain_results(self) -> None:
        while self._pgconn.get_result() is not None:
            pass

    def _rollback(self) -> None:
        self._conn.execute("ROLLBACK")  # read only: nothing to commit


class CopyFailed(SourceError):
    """The COPY failed on the server; ``sqlstate`` says why (translated by the source)."""

    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def _error_of(result: Any) -> str:
    if result is None:
        return "the server sent no result for the COPY"
    message = result.error_message
    return (message.decode("utf-8", "replace") if isinstance(message, bytes)
            else str(message)).strip()


def _sqlstate_of(result: Any) -> str | None:
    if result is None:
        return None
    code = result.error_field(pq.DiagnosticField.SQLSTATE)
    return code.decode() if code else None



def copy_query(
    plan: ReadPlan, key_columns: Sequence[str], columns: Sequence[str], after: Key | None,
    delimiter: str, literal: Callable[[str], str],
) -> str:
    """``COPY (SELECT columns … WHERE key > after ORDER BY key) TO STDOUT (FORMAT csv)``:
    names quoted, the cursor's values and the delimiter written as literals quoted by
    ``literal`` (a COPY takes no parameters). No LIMIT: the stream runs to the end of
    the table or until the slice closes it."""
    keys = ["t." + quote_ident(k) for k in key_columns]
    where = ""
    if after is not None:
        casts = [f"CAST({literal(key_text(v))} AS {t})"
                 for v, t in zip(after, plan.key_types, strict=True)]
        where = (f" WHERE {keys[0]} > {casts[0]}" if len(keys) == 1
                 else f" WHERE ({', '.join(keys)}) > ({', '.join(casts)})")
    select = ", ".join("t." + quote_ident(c) for c in columns)
    options = "FORMAT csv" if delimiter == "," else f"FORMAT csv, DELIMITER {literal(delimiter)}"
    return (f"COPY (SELECT {select} FROM {plan.qualified} AS t{where} "
            f"ORDER BY {', '.join(keys)}) TO STDOUT ({options})")
