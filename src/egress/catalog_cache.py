"""A short-lived cache of sources' catalogs, for the checks a create makes.

Creating an export checks its tables against the source's catalog. Opening the source
and describing the tables on every create cost the API as much CPU as the rest of the
create (a connection, catalog queries), and on a PostgreSQL source a new server session
per request. The API keeps what it read for ``ttl`` seconds (``api.catalog_cache_seconds``).

What is cached is only what was found: a table not in the cached catalog is looked up
again at once (a table created a moment ago is never refused), and a cached table that
was dropped since fails the export's task when a worker reads it, as a table dropped
between create and claim always did. The workers never use this cache: they describe
the tables themselves when they run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from egress.sources.base import Source, TableInfo


@dataclass
class _Entry:
    at: float
    tables: list[str] | None = None
    infos: dict[str, TableInfo] = field(default_factory=dict)


class CatalogCache:
    """Catalog reads by source URL, each kept ``ttl`` seconds."""

    def __init__(self, ttl: float, *, clock: Callable[[], float] = time.monotonic,
                 max_sources: int = 256) -> None:
        self.ttl, self._clock, self._max = ttl, clock, max_sources
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        #: catalog reads that went to a source (for the tests and the bench)
        self.misses = 0

    def _entry(self, url: str) -> _Entry:
        now = self._clock()
        entry = self._entries.get(url)
        if entry is None or now - entry.at > self.ttl:
            if len(self._entries) >= self._max:
                self._entries.clear()
            entry = self._entries[url] = _Entry(at=now)
        return entry

    def lookup(self, url: str, tables: list[str] | None,
               opener: Callable[[], Source]) -> tuple[list[str], list[TableInfo]]:
        """(table names, their catalog entries): ``tables`` given, or every table of the
        source when None; what the cache lacks is read from ``opener()``'s source."""
        with self._lock:
            entry = self._entry(url)
            names = list(tables) if tables is not None else entry.tables
            known = dict(entry.infos)
        if names is not None and all(n in known for n in names):
            return names, [known[n] for n in names]
        source = opener()
        self.misses += 1
        try:
            if names is None:
                names = source.tables()
            infos = [known.get(n) or source.describe(n) for n in names]
        finally:
            source.close()
        with self._lock:
            entry = self._entry(url)
            if tables is None:
                entry.tables = names
            entry.infos.update(zip(names, infos, strict=True))
        return names, infos
