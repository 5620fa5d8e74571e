"""Timestamp filter values as instants.

A filter value on a timestamp column is an ISO 8601 string (``2024-01-31T12:00:00Z``).
Egress reads timestamps as the SQLite converter does (``sources/sqlite.py``): a value
without an offset is UTC, one with an offset is converted to UTC. Filter values follow
the same rule, so that a comparison is between two instants, never between two texts.
"""

from __future__ import annotations

import datetime as dt

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def parse_instant(text: str) -> dt.datetime:
    """``text`` as an aware UTC datetime; ValueError if it is not an ISO timestamp (or
    lies outside years 1–9999 once converted to UTC)."""
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    try:
        return value.astimezone(dt.UTC)
    except OverflowError as exc:
        raise ValueError(f"{text!r} is outside years 1–9999 in UTC") from exc


def epoch_micros(text: str) -> int:
    """Microseconds since 1970-01-01T00:00:00Z of the ISO timestamp ``text``."""
    return (parse_instant(text) - EPOCH) // _MICROSECOND


def iso_date(text: str) -> str:
    """The ISO date ``text`` in its canonical form (``2024-01-31``)."""
    return dt.date.fromisoformat(text).isoformat()
