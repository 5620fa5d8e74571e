"""Sources by URL scheme. ``open_source`` is the only way the rest of egress opens one."""

from __future__ import annotations

from collections.abc import Callable

from egress.exceptions import UnknownNameError
from egress.sources.base import Column, Source, TableInfo


def _open_sqlite(url: str) -> Source:
    from egress.sources.sqlite import SqliteSource

    return SqliteSource(url)


def _open_postgres(url: str) -> Source:
    from egress.sources.postgres import PostgresSource

    return PostgresSource(url)


SOURCE_KINDS: dict[str, Callable[[str], Source]] = {
    "sqlite": _open_sqlite,
    "postgresql": _open_postgres,
    "postgres": _open_postgres,
}


def source_kind(url: str) -> str:
    """The registry name of a SQLAlchemy-style URL (``postgresql+psycopg://`` → postgresql)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    return scheme.split("+", 1)[0].lower()


def open_source(url: str) -> Source:
    kind = source_kind(url)
    try:
        opener = SOURCE_KINDS[kind]
    except KeyError:
        raise UnknownNameError("source kind", kind or url, SOURCE_KINDS) from None
    return opener(url)


__all__ = ["SOURCE_KINDS", "Column", "Source", "TableInfo", "open_source"]
