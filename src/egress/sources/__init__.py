"""Sources by URL scheme: the one registry of what egress can read.

A source kind is an entry of :data:`SOURCE_KINDS`: how to open its tables and, if it can,
a free-form read-only query. A new engine is one module plus one
:func:`register_source_kind` call; ``open_source`` is the only way the rest of egress
opens a source. The openers import their module on first use, so importing egress never
loads a driver it does not need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from egress.exceptions import UnknownNameError
from egress.sources import lazy_imports
from egress.sources.base import Column, Source, TableInfo
from egress.sources.query import Query

# before any driver is imported (they are imported by the openers and source modules)
for _name in lazy_imports.DEFERRED:
    lazy_imports.defer(_name)

#: How long one page of a query export may run by default (seconds).
DEFAULT_QUERY_TIMEOUT = 300.0


@dataclass(frozen=True)
class SourceKind:
    """How to open one kind of source from its URL."""

    #: ``open_tables(url)``: a source whose tables can be exported.
    open_tables: Callable[[str], Source]
    #: ``open_query(url, query, timeout)``: a source reading one read-only query, or None
    #: when this kind runs no free-form queries.
    open_query: Callable[[str, Query, float], Source] | None = None
    #: The engine runs the query itself: tasks are submitted and polled (worker/remote.py).
    remote: bool = False


def _sqlite_tables(url: str) -> Source:
    from egress.sources.sqlite import SqliteSource

    return SqliteSource(url)


def _sqlite_query(url: str, query: Query, timeout: float) -> Source:
    from egress.sources.sqlite_query import SqliteQuerySource

    return SqliteQuerySource(url, query, timeout)


def _postgres_tables(url: str) -> Source:
    from egress.sources.postgres import PostgresSource

    return PostgresSource(url)


def _postgres_query(url: str, query: Query, timeout: float) -> Source:
    from egress.sources.pg_query import PostgresQuerySource

    return PostgresQuerySource(url, query, timeout)


def _duckdb_tables(url: str) -> Source:
    from egress.sources.duckdb import DuckdbSource

    return DuckdbSource(url)


def _mysql_tables(url: str) -> Source:
    from egress.sources.mysql import MySqlSource

    return MySqlSource(url)


def _trino_tables(url: str) -> Source:
    from egress.sources.trino import TrinoSource

    return TrinoSource(url)


def _trino_query(url: str, query: Query, timeout: float) -> Source:
    from egress.sources.trino import TrinoSource

    return TrinoSource(url, query, timeout)


SOURCE_KINDS: dict[str, SourceKind] = {}


def register_source_kind(name: str, kind: SourceKind, *aliases: str) -> None:
    """Make URLs of scheme ``name`` (and ``aliases``; ``name+driver`` too) open ``kind``."""
    for scheme in (name, *aliases):
        SOURCE_KINDS[scheme] = kind


register_source_kind("sqlite", SourceKind(_sqlite_tables, _sqlite_query))
register_source_kind("postgresql", SourceKind(_postgres_tables, _postgres_query), "postgres")
register_source_kind("duckdb", SourceKind(_duckdb_tables))
register_source_kind("mysql", SourceKind(_mysql_tables), "mariadb")
# Starburst is Trino: the same protocol (trino+https:// for TLS)
register_source_kind("trino", SourceKind(_trino_tables, _trino_query, remote=True))


def source_kind(url: str) -> str:
    """The registry name of a SQLAlchemy-style URL (``postgresql+psycopg://`` → postgresql)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    return scheme.split("+", 1)[0].lower()


def is_remote(url: str) -> bool:
    """Whether ``url`` is a remote engine's (its tasks are submitted and polled)."""
    kind = SOURCE_KINDS.get(source_kind(url))
    return kind is not None and kind.remote


def open_source(url: str, query: Query | None = None,
                timeout: float = DEFAULT_QUERY_TIMEOUT) -> Source:
    """The source at ``url``: its tables, or with ``query`` that query's result (each page
    stopped after ``timeout`` seconds). UnknownNameError lists the kinds there are."""
    name = source_kind(url)
    kind = SOURCE_KINDS.get(name)
    if kind is None:
        raise UnknownNameError("source kind", name or url, SOURCE_KINDS)
    if query is None:
        return kind.open_tables(url)
    if kind.open_query is None:
        able = [k for k, v in SOURCE_KINDS.items() if v.open_query is not None]
        raise UnknownNameError("source kind for query exports", name, able)
    return kind.open_query(url, query, timeout)


__all__ = ["SOURCE_KINDS", "Column", "Source", "SourceKind", "TableInfo", "is_remote",
           "open_source",
           "register_source_kind", "source_kind"]
