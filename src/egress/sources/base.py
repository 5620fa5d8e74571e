"""The Source protocol: a catalog, and Arrow record batches in key order after a key.

A source hands the engine batches whose schema is exactly ``TableInfo.schema`` plus
``TableInfo.hidden_columns`` (key columns that are not part of the output, such as
SQLite's ``rowid``), always in ascending key order, never using OFFSET.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from egress.domain.keys import Key
from egress.domain.predicate import Predicate

#: Field metadata key that says what a column held in the source when Arrow's type
#: alone does not tell (``json``; ``decimal`` for unconstrained NUMERIC kept as text).
LOGICAL_TYPE = b"egress.logical_type"
#: Field metadata key holding the source's own declared type (for SQL dumps).
SOURCE_TYPE = b"egress.source_type"


@dataclass(frozen=True)
class Column:
    name: str
    source_type: str
    arrow_type: pa.DataType
    nullable: bool = True
    logical_type: str | None = None

    def field(self) -> pa.Field:
        metadata = {SOURCE_TYPE: self.source_type.encode()}
        if self.logical_type:
            metadata[LOGICAL_TYPE] = self.logical_type.encode()
        return pa.field(self.name, self.arrow_type, nullable=self.nullable, metadata=metadata)


@dataclass(frozen=True)
class TableInfo:
    """What the catalog says about one table."""

    name: str
    columns: tuple[Column, ...]
    #: Columns that order the table and whose values form the cursor.
    key_columns: tuple[str, ...]
    #: Columns added to each batch only to carry the key (e.g. ``rowid``); dropped on output.
    hidden_columns: tuple[str, ...] = ()
    row_estimate: int | None = None
    primary_key: tuple[str, ...] = field(default=())
    #: The key is egress's own bookkeeping (a position in a remote engine's result), not
    #: a value of the data: manifests do not show it.
    opaque_key: bool = False

    @property
    def schema(self) -> pa.Schema:
        """The output schema (without hidden columns)."""
        return pa.schema([c.field() for c in self.columns])

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


class Source(Protocol):
    """A database egress reads from."""

    #: SQL dialect of the source (``sqlite``, ``postgresql``), used by the SQL dump.
    dialect: str

    def tables(self) -> list[str]:
        """Names of the tables that can be exported."""
        ...

    def describe(self, table: str) -> TableInfo:
        """Catalog entry of ``table``; raises TableNotFoundError / NoUsableKeyError."""
        ...

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Up to ``limit`` rows with key > ``after`` (and matching ``predicate``: its
        values bound as parameters), in key order, as batches."""
        ...

    def close(self) -> None: ...


def forward_only(source: object) -> bool:
    """Whether rows read from ``source`` cannot be read again (a remote engine's result
    stream, whose class sets ``forward_only = True``): it is never read ahead, and a part
    read from it is never dropped."""
    return bool(getattr(source, "forward_only", False))
