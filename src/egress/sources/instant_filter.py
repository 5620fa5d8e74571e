"""Timestamp conditions applied to converted batches (SQLite), where SQL cannot compare
instants.

SQLite keeps timestamps as text in many forms (``2024-01-31 12:00:00``,
``2024-01-31T12:00:00.25Z``, ``…+05:30``, ``…-0800``, a date alone) and compares texts
character by character, so ``'2024-01-31 12:00:00+00:00' = '2024-01-31T12:00:00Z'`` is
false in SQL. Its date functions keep only milliseconds and read neither ``±hhmm`` nor an
hour alone, and an SQL expression that does read every form costs tens of microseconds a
row. So the SQLite source leaves conditions on timestamp columns out of its SQL and
applies them here, to the values its converter produced (Arrow timestamps, UTC): the
rows a filter keeps are by construction the rows whose exported value matches. A NULL,
as in SQL, matches no comparison.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.instants import parse_instant
from egress.domain.keys import Key
from egress.domain.predicate import Condition, Predicate
from egress.sources.base import TableInfo

_COMPARE = {
    "=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
    ">": pc.greater, ">=": pc.greater_equal,
}


def split_timestamp_conditions(
    predicate: Predicate | None, table: TableInfo
) -> tuple[Predicate | None, tuple[Condition, ...]]:
    """(the conditions for SQL, the comparisons on timestamp columns for :func:`keep`);
    ``is_null``/``not_null`` stay in SQL (the stored text is NULL or not)."""
    if predicate is None:
        return None, ()
    stamps = {c.name for c in table.columns if pa.types.is_timestamp(c.arrow_type)}
    later = tuple(c for c in predicate.conditions
                  if c.column in stamps and c.op in (*_COMPARE, "in"))
    rest = tuple(c for c in predicate.conditions if c not in later)
    return (Predicate(rest) if rest else None), later


def _scalar(value: object, type_: pa.TimestampType) -> pa.Scalar:
    instant = parse_instant(str(value))
    # a column without a time zone holds UTC wall times (as the converter reads them)
    return pa.scalar(instant if type_.tz else instant.replace(tzinfo=None), type_)


def keep(batch: pa.RecordBatch, conditions: tuple[Condition, ...]) -> pa.RecordBatch:
    """The rows of ``batch`` that meet every condition."""
    if not conditions or batch.num_rows == 0:
        return batch
    mask: pa.Array | None = None
    for c in conditions:
        column = batch.column(c.column)
        if c.op == "in" and isinstance(c.value, tuple):
            values = pa.array([_scalar(v, column.type).as_py() for v in c.value], column.type)
            hit = pc.is_in(column, value_set=values)  # a NULL is in no list
        else:
            hit = _COMPARE[c.op](column, _scalar(c.value, column.type))
        mask = hit if mask is None else pc.and_kleene(mask, hit)
    assert mask is not None
    return batch.filter(mask, null_selection_behavior="drop")


def read_matching(
    read: Callable[[Key | None], Iterator[pa.RecordBatch]], table: TableInfo,
    after: Key | None, limit: int, conditions: tuple[Condition, ...],
) -> Iterator[pa.RecordBatch]:
    """Up to ``limit`` rows after ``after`` that meet ``conditions``, in key order.

    ``read(cursor)`` reads the next page of ``limit`` rows (meeting the conditions left
    in SQL); pages are read until ``limit`` rows matched or the table ended, so that a
    short answer still means the end of the table, as the engine expects."""
    if not conditions:
        yield from read(after)
        return
    wanted = limit
    while True:
        scanned, last = 0, None
        with contextlib.closing(read(after)) as page:
            for batch in page:
                scanned, last = scanned + batch.num_rows, batch
                kept = keep(batch, conditions)
                if kept.num_rows >= wanted:
                    yield kept.slice(0, wanted)
                    return
                wanted -= kept.num_rows
                if kept.num_rows:
                    yield kept
        if scanned < limit or last is None:
            return
        after = tuple(last.column(k)[-1].as_py() for k in table.key_columns)
