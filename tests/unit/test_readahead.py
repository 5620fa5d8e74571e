"""PageReader: pages read on a second thread are the pages a direct read gives, in order;
a page asked for elsewhere restarts the thread; errors reach the consumer; close stops it."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from egress.engine.readahead import PageReader
from egress.exceptions import TableNotFoundError
from egress.sources.base import TableInfo
from egress.sources.sqlite import SqliteSource

ROWS = 1000
LIMIT = 300


@pytest.fixture
def source(tmp_path: Path) -> Iterator[SqliteSource]:
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i * 2, f"n{i}") for i in range(ROWS)])
    conn.commit()
    conn.close()
    src = SqliteSource(f"sqlite:///{path}")
    yield src
    src.close()


def _last(batch: pa.RecordBatch) -> tuple[object, ...]:
    return (batch.column("id")[-1].as_py(),)


def _ids(batches: Iterator[pa.RecordBatch]) -> list[int]:
    return [i for b in batches for i in b.column("id").to_pylist()]


def _reader(source: SqliteSource, table: TableInfo) -> PageReader:
    return PageReader(source, table, LIMIT, None, _last)


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("egress-read-")}


def test_pages_equal_direct_reads_in_key_order(source: SqliteSource) -> None:
    table = source.describe("t")
    with _reader(source, table) as pages:
        after, seen = None, []
        while True:
            ids = _ids(pages.page(after))
            assert ids == _ids(source.read(table, after, LIMIT))
            seen += ids
            if len(ids) < LIMIT:
                break
            after = (ids[-1],)
    assert seen == [i * 2 for i in range(ROWS)]
    assert not _threads()


def test_another_cursor_restarts_and_an_abandoned_page_is_not_reused(
    source: SqliteSource,
) -> None:
    table = source.describe("t")
    with _reader(source, table) as pages:
        assert _ids(pages.page(None))[-1] == (LIMIT - 1) * 2
        # a resumed cursor elsewhere: the page read ahead after 598 is dropped
        assert _ids(pages.page((100,))) == [i * 2 for i in range(51, 51 + LIMIT)]
        # half a page taken, then the same cursor again: the whole page, from its start
        it = pages.page((700,))
        assert next(it).column("id")[0].as_py() == 702
        it.close()
        assert _ids(pages.page((700,))) == [i * 2 for i in range(351, 351 + LIMIT)]
    assert not _threads()


def test_a_read_error_reaches_the_consumer(source: SqliteSource, tmp_path: Path) -> None:
    table = source.describe("t")
    bad = TableInfo(**{**table.__dict__, "name": "missing"})
    with _reader(source, bad) as pages, pytest.raises(TableNotFoundError, match="missing"):
        list(pages.page(None))
    assert not _threads()


def test_close_stops_a_thread_blocked_on_a_full_queue(source: SqliteSource) -> None:
    table = source.describe("t")
    pages = PageReader(source, table, 1, None, _last)  # a page per row: the queue fills
    assert _ids(pages.page(None)) == [0]
    assert _threads()
    pages.close()
    assert not _threads()
