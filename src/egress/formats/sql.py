"""SQL dump in the source's dialect: CREATE TABLE, then batched multi-row INSERTs.

Each file is loadable on its own (``CREATE TABLE IF NOT EXISTS``, one transaction), with
``sqlite3 db < file.sql``, ``psql -f file.sql``, ``duckdb db < file.sql`` or ``mysql db <
file.sql`` (the MySQL dialect and the session settings it starts with:
:mod:`egress.formats.sql_mysql`). A statement holds ``rows_per_insert`` rows counted from
the start of the part, so statements end where they would in an uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from egress.exceptions import UnknownNameError
from egress.formats import render, sql_mysql
from egress.formats.base import TextFormat, TextPartEncoder, concat_strings

DIALECTS = ("sqlite", "postgresql", "duckdb", "mysql")


def quote_ident(name: str, dialect: str = "sqlite") -> str:
    if dialect == "mysql":
        return sql_mysql.quote_ident(name)
    return '"' + name.replace('"', '""') + '"'


class SqlDumpFormat(TextFormat):
    name = "sql"
    extension = "sql"

    def __init__(
        self,
        table: str,
        dialect: str = "sqlite",
        primary_key: Sequence[str] = (),
        rows_per_insert: int = 500,
    ) -> None:
        if dialect not in DIALECTS:
            raise UnknownNameError("SQL dialect", dialect, DIALECTS)
        self.table, self.dialect = table, dialect
        self.primary_key = tuple(primary_key)
        self.rows_per_insert = max(1, int(rows_per_insert))

    def _quote(self, name: str) -> str:
        return quote_ident(name, self.dialect)

    def header(self, schema: pa.Schema) -> bytes:
        lines = []
        for field in schema:
            declared = ((field.metadata or {}).get(b"egress.source_type") or b"").decode()
            not_null = "" if field.nullable else " NOT NULL"
            lines.append(f"  {self._quote(field.name)} {declared}{not_null}".rstrip())
        if self.primary_key:
            lines.append(f"  PRIMARY KEY ({', '.join(map(self._quote, self.primary_key))})")
        body = ",\n".join(lines)
        mysql = self.dialect == "mysql"
        begin = sql_mysql.SESSION + "START TRANSACTION;\n" if mysql else "BEGIN;\n"
        options = " DEFAULT CHARSET=utf8mb4" if mysql else ""
        return (
            f"-- egress SQL dump of table {self.table} ({self.dialect})\n"
            f"{begin}CREATE TABLE IF NOT EXISTS {self._quote(self.table)} (\n{body}\n)"
            f"{options};\n"
        ).encode()

    def footer(
        self, schema: pa.Schema, rows_in_file: int, metas: Sequence[bytes] = ()
    ) -> bytes:
        return b"COMMIT;\n"

    def part_encoder(self, schema: pa.Schema, rows_before: int, offset: int = 0) -> _SqlPart:
        columns = ", ".join(self._quote(f.name) for f in schema)
        insert = f"INSERT INTO {self._quote(self.table)} ({columns}) VALUES\n"
        return _SqlPart(self, insert)


class _SqlPart(TextPartEncoder):
    def __init__(self, fmt: SqlDumpFormat, insert: str) -> None:
        super().__init__()
        self._fmt, self._insert, self._rows = fmt, insert, 0

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        every = self._fmt.rows_per_insert
        position = np.arange(self._rows, self._rows + n) % every
        opens = pa.array(position == 0)
        closes = pa.array(position == every - 1)
        dialect = self._fmt.dialect
        pieces: list[pa.Array | str] = [pc.if_else(opens, self._insert, ",\n"), "("]
        for i, (field, array) in enumerate(zip(batch.schema, batch.columns, strict=True)):
            if i:
                pieces.append(",")
            pieces.append(sql_mysql.literal(array, field) if dialect == "mysql"
                          else render.sql_literal(array, field, dialect))
        pieces += [")", pc.if_else(closes, ";\n", "")]
        # one join of every piece (no row array joined again into lines), and a NULL is
        # written by the join itself: no copy of a column to fill it
        lines = pc.binary_join_element_wise(*pieces, "", null_handling="replace",
                                            null_replacement="NULL")
        self.append(concat_strings(lines))
        self._rows += n

    def finish(self) -> bytes:
        if self._rows % self._fmt.rows_per_insert:
            self.append(b";\n")
        return super().finish()
