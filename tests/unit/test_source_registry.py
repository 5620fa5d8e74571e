"""The source registry: a new kind of source is one class and one registration, and then
every export path reads it (shown here with an in-memory source of Arrow tables)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import egress
from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.exceptions import TableNotFoundError, UnknownNameError
from egress.sources import SOURCE_KINDS, SourceKind, open_source, register_source_kind
from egress.sources.base import Column, TableInfo
from egress.sources.query import Query

EVENTS = pa.table({"id": pa.array(range(1, 1001), pa.int64()),
                   "kind": pa.array([f"k{i % 3}" for i in range(1000)])})


class MemorySource:
    """Tables held in memory, read in key order after a key: all a source has to do."""

    dialect = "sqlite"

    def __init__(self, url: str) -> None:
        self.data = {"events": EVENTS}

    def tables(self) -> list[str]:
        return list(self.data)

    def describe(self, table: str) -> TableInfo:
        if table not in self.data:
            raise TableNotFoundError(table, self.data)
        columns = tuple(Column(f.name, str(f.type), f.type) for f in self.data[table].schema)
        return TableInfo(table, columns, key_columns=("id",), row_estimate=1000,
                         primary_key=("id",))

    def read(self, table: TableInfo, after: Key | None, limit: int,
             predicate: Predicate | None = None) -> Iterator[pa.RecordBatch]:
        rows = self.data[table.name]
        if after is not None:
            rows = rows.filter(pc.greater(rows["id"], after[0]))
        yield from rows.slice(0, limit).to_batches()

    def close(self) -> None:
        pass


@pytest.fixture
def memory_kind() -> Iterator[None]:
    register_source_kind("memory", SourceKind(MemorySource))
    yield
    del SOURCE_KINDS["memory"]


def test_a_registered_kind_is_exported_like_any_other(memory_kind: None,
                                                       tmp_path: Path) -> None:
    result = egress.export("memory://demo", ["events"], to=tmp_path, format="jsonl",
                           part_rows=128)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(range(1, 1001))
    assert result.manifest is not None and result.manifest["total_rows"] == 1000


def test_unknown_kinds_and_query_support_are_named(memory_kind: None) -> None:
    with pytest.raises(UnknownNameError, match=r"unknown source kind 'nosuch'; known: .*memory"):
        open_source("nosuch://x")
    with pytest.raises(UnknownNameError, match="query exports 'memory'; known: postgres, "
                                               "postgresql, sqlite"):
        open_source("memory://x", Query("SELECT 1 AS id", ("id",)))
