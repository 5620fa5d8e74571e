"""Timestamp filters compared as instants, not as text.

A filter value such as ``2023-01-20T00:00:00Z`` and a stored value such as
``2023-01-20 00:00:30+00:00`` name instants; compared as text, ``T`` sorts after a space
and an offset is not applied, so a filter silently selects the wrong rows. Both sides are
brought to one form: UTC, ``YYYY-MM-DD HH:MM:SS.ffffff`` — read the way the sources read
the column (a value without an offset is UTC; one with an offset is converted to UTC; a
date alone is midnight).
"""

from __future__ import annotations

import datetime as dt

#: Microseconds: what the readers keep (Arrow timestamp[us]).
_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def instant_text(value: str) -> str:
    """A checked ISO 8601 filter value as UTC ``YYYY-MM-DD HH:MM:SS.ffffff``."""
    moment = dt.datetime.fromisoformat(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment.strftime(_FORMAT)


def sqlite_instant_sql(column: str) -> str:
    """SQL that brings a SQLite text timestamp (``column``: quoted SQL) to the form of
    :func:`instant_text`, exactly: SQLite's ``strftime`` applies the offset (and reads
    ``T`` or a space, a date alone as midnight) but keeps milliseconds only, so the
    fraction is cut out first and put back digit for digit (an offset is whole minutes:
    it never changes the fraction). NULL for text that is not a timestamp."""
    dot = f"instr({column}, '.')"
    after = f"substr({column}, {dot} + 1)"  # the fraction's digits and the offset, if any
    cut = (f"CASE WHEN instr({after}, 'Z') > 0 THEN instr({after}, 'Z') "
           f"WHEN instr({after}, '+') > 0 THEN instr({after}, '+') "
           f"WHEN instr({after}, '-') > 0 THEN instr({after}, '-') "
           f"ELSE length({after}) + 1 END")
    digits = f"substr({after}, 1, ({cut}) - 1)"
    whole = f"substr({column}, 1, {dot} - 1) || substr({after}, {cut})"
    return (f"(CASE WHEN {dot} = 0 THEN strftime('%Y-%m-%d %H:%M:%S', {column}) || '.000000' "
            f"ELSE strftime('%Y-%m-%d %H:%M:%S', {whole}) || '.' || "
            f"substr({digits} || '000000', 1, 6) END)")
