"""The API's short-lived catalog cache (catalog_cache.py) on a real SQLite source."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from egress.catalog_cache import CatalogCache
from egress.exceptions import TableNotFoundError
from egress.sources import open_source


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("CREATE TABLE b (id INTEGER PRIMARY KEY)")
    return path


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_table_read_once_is_served_from_the_cache_until_the_ttl(db: Path) -> None:
    url, clock = f"sqlite:///{db}", Clock()
    cache = CatalogCache(10.0, clock=clock)
    opened: list[str] = []

    def opener():
        opened.append(url)
        return open_source(url)

    names, infos = cache.lookup(url, ["a"], opener)
    assert names == ["a"] and [i.column_names for i in infos] == [["id", "v"]]
    clock.now = 9.0
    assert cache.lookup(url, ["a"], opener)[1] == infos
    assert len(opened) == 1
    with sqlite3.connect(db) as conn:  # a schema change shows once the entry is old
        conn.execute("ALTER TABLE a ADD COLUMN w INTEGER")
    clock.now = 10.5
    assert cache.lookup(url, ["a"], opener)[1][0].column_names == ["id", "v", "w"]
    assert len(opened) == 2 and cache.misses == 2


def test_a_table_the_cache_lacks_is_looked_up_at_once(db: Path) -> None:
    url = f"sqlite:///{db}"
    cache = CatalogCache(60.0)
    assert cache.lookup(url, None, lambda: open_source(url))[0] == ["a", "b"]
    with sqlite3.connect(db) as conn:  # created a moment ago: never refused
        conn.execute("CREATE TABLE c (id INTEGER PRIMARY KEY)")
    names, infos = cache.lookup(url, ["c", "a"], lambda: open_source(url))
    assert names == ["c", "a"] and [i.name for i in infos] == ["c", "a"]
    with pytest.raises(TableNotFoundError):  # unknown: the source's own error
        cache.lookup(url, ["nope"], lambda: open_source(url))
    assert cache.misses == 3
    # all tables: the list as first read, until it is old
    assert cache.lookup(url, None, lambda: open_source(url))[0] == ["a", "b"]
    assert cache.misses == 3
