"""How values are bound into a PostgreSQL keyset query: filter values by the column's
kind (a timestamp as a real instant, a date as a date, the rest as text cast to the
column's own type) and cursor values as text the key column's input function reads
back exactly."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa

from egress.domain.keys import KeyValue
from egress.exceptions import DataError


def bound_type(arrow_type: pa.DataType) -> str:
    """The type a filter value on a column of ``arrow_type`` is bound as."""
    if pa.types.is_timestamp(arrow_type):
        return "timestamptz"
    if pa.types.is_date(arrow_type):
        return "date"
    return "text"


def filter_text(value: object) -> str:
    """A filter value as text for ``CAST($n::text AS type)``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def key_text(value: KeyValue) -> str:
    """A cursor value as text that the key column's input function reads back exactly."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest exact text; PostgreSQL reads nan/inf too
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, int | decimal.Decimal | str):
        return str(value)
    raise DataError(f"cannot use a value of type {type(value).__name__} as a PostgreSQL key")
