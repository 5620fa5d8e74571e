"""Parts cut from the source's own CSV stream (the ``postgres`` CSV dialect).

A source that writes CSV itself (PostgreSQL's ``COPY … TO STDOUT (FORMAT csv)``) hands
the slice rows as bytes, one COPY per slice. A part is still the next ``part_rows`` rows
after the cursor (grown as other parts are to reach the sink's minimum size), so part
boundaries depend only on the data and the plan, and a resumed run writes the same
bytes. The cursor is read from the part's last row alone: its key fields, parsed as
CSV (integers as ints, every other type as the text the server wrote, which the key
column's type reads back exactly when the next stream starts after it).

Nothing here reads ahead: the calling thread reads part n + 1 from the stream while the
committer stores part n, and the server writes the rows as they are read.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa

from egress.domain.keys import Key
from egress.exceptions import ConfigError
from egress.sources.base import Source, TableInfo


class RowStream(Protocol):
    """A running stream of CSV rows in key order (sources/pg_copy.py: ``CsvCopy``)."""

    ended: bool

    def take(self, n: int) -> Any: ...

    def close(self) -> None: ...


def check_server_csv(source: Source, table: TableInfo, columns: list[str],
                     predicate: object | None) -> None:
    """Refuse what the ``postgres`` dialect cannot export, naming what is allowed."""
    if not getattr(source, "server_csv", False):
        raise ConfigError(
            "the postgres CSV dialect needs tables of a PostgreSQL source, whose server "
            f"writes the CSV (this export reads {_what(source)}); use the default egress "
            "dialect"
        )
    if predicate is not None:
        raise ConfigError("the postgres CSV dialect exports whole tables or column subsets; "
                          "filters on rows need the default egress dialect")
    missing = [k for k in table.key_columns if k not in columns]
    if missing:
        raise ConfigError(
            f"the postgres CSV dialect reads the cursor from the output, so the exported "
            f"columns must include the key of {table.name!r}: add {', '.join(missing)}"
        )


def _what(source: Source) -> str:
    kind = getattr(source, "dialect", "another kind of")
    return f"a query of a {kind} source" if hasattr(source, "query") else f"a {kind} source"


class CopiedParts:
    """The rows of one slice, read from the source's CSV stream in parts."""

    def __init__(self, source: Source, table: TableInfo, columns: list[str],
                 delimiter: str) -> None:
        self._source, self._table, self._columns = source, table, columns
        self._delimiter = delimiter
        self._stream: RowStream | None = None
        #: the key after which the stream's next row comes
        self._after: Key | None = None
        positions = {name: i for i, name in enumerate(columns)}
        self._key_at = [positions[k] for k in table.key_columns]
        types = {c.name: c.arrow_type for c in table.columns}
        self._convert: list[Callable[[str], Any]] = [
            int if pa.types.is_integer(types[k]) else str for k in table.key_columns
        ]

    def take(self, after: Key | None, rows: int) -> tuple[bytes, int, Key | None, Key | None]:
        """(bytes, rows, first key, last key) of the ``rows`` rows after ``after``
        (fewer only at the end of the table)."""
        if self._stream is None or self._after != after:
            self.close()
            copy_csv: Any = getattr(self._source, "copy_csv")  # noqa: B009 - checked by plan
            self._stream = copy_csv(self._table, after, self._columns, self._delimiter)
        assert self._stream is not None
        got = self._stream.take(rows)
        first = None if got.first is None else self._key(got.first)
        last = None if got.last is None else self._key(got.last)
        self._after = last if last is not None else after
        return got.data, got.rows, first, last

    def _key(self, row: bytes | memoryview) -> Key:
        # the key's columns are NOT NULL: an empty field is an empty string
        text = bytes(row).decode("utf-8")
        fields = next(csv.reader(io.StringIO(text, newline=""), delimiter=self._delimiter))
        return tuple(convert(fields[index])
                     for index, convert in zip(self._key_at, self._convert, strict=True))

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
