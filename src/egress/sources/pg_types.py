"""How each PostgreSQL column type is selected and which Arrow type it becomes.

The ADBC PostgreSQL driver returns most built-in types natively but some as opaque
extension types (NUMERIC as text in ``arrow.opaque``, jsonb as ``arrow.json``, uuid as
``arrow.uuid``, inet/timetz as binary blobs). Those, and every type this table does not
name, are selected as ``col::text`` so that the driver hands back plain strings whose
text PostgreSQL itself wrote. The mapping is documented in docs/formats.md.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.keys import KeyValue
from egress.exceptions import DataError

#: Scalar types the driver returns natively, by ``pg_type.typname``.
_NATIVE: dict[str, pa.DataType] = {
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "bool": pa.bool_(),
    "text": pa.string(),
    "varchar": pa.string(),
    "bpchar": pa.string(),
    "bytea": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "time": pa.time64("us"),
}
#: Element types of one-dimensional arrays the driver returns as Arrow lists.
_NATIVE_ELEMENTS = ("int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar")

# PostgreSQL's finite range starts in 4713 BC; the driver turns ±infinity into values
# far below it (it shifts PostgreSQL's sentinels by the 2000-01-01 epoch and wraps).
_MIN_TIMESTAMP_US = -210_866_803_200_000_000  # 4714-11-24 BC, the earliest timestamp
_MIN_DATE_DAYS = -2_440_588  # the same day
_DAY_US = 86_400_000_000


@dataclass(frozen=True)
class PgMapping:
    """How one column is selected and what Arrow type it becomes."""

    arrow_type: pa.DataType
    #: SQL expression of the selected value; ``{c}`` is the qualified, quoted column.
    select: str = "{c}"
    logical_type: str | None = None
    #: Arrays read as lists need a check that each value is one-dimensional from 1.
    list_check: bool = False


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    """(precision, scale) of a NUMERIC type modifier; None when unconstrained."""
    if typmod < 4:
        return None
    bits = typmod - 4
    # PostgreSQL 15 stores the scale as an 11-bit signed number (negative scales).
    return (bits >> 16) & 0xFFFF, ((bits & 0x7FF) ^ 1024) - 1024


def map_type(typname: str, typmod: int, element: str | None, ndims: int) -> PgMapping:
    """The mapping of a column whose (base) type is ``typname``.

    ``element`` is the element type of an array type (its ``typname`` starts with
    ``_``); ``ndims`` is the declared number of dimensions (``int[][]`` → 2).
    """
    if element is not None:
        if ndims > 1:
            return PgMapping(pa.string(), "{c}::text")
        if element in _NATIVE_ELEMENTS:
            return PgMapping(pa.list_(_NATIVE[element]), list_check=True)
        return PgMapping(pa.list_(pa.string()), "{c}::text[]", list_check=True)
    if typname == "numeric":
        ps = numeric_precision_scale(typmod)
        if ps is not None and 1 <= ps[0] <= 38 and 0 <= ps[1] <= ps[0]:
            return PgMapping(pa.decimal128(*ps), "{c}::text")
        return PgMapping(pa.string(), "{c}::text", logical_type="decimal")
    if typname == "jsonb":
        return PgMapping(pa.string(), "{c}::text", logical_type="json")
    if typname == "json":
        # json keeps its input text; a line break in it can only be whitespace between
        # tokens (strings escape them), so a space keeps JSON Lines one row per line.
        return PgMapping(pa.string(), "translate({c}::text, E'\\r\\n', '  ')", logical_type="json")
    if typname in _NATIVE:
        return PgMapping(_NATIVE[typname])
    # uuid, interval, timetz, inet, money, enums, ranges, … : PostgreSQL's own text
    return PgMapping(pa.string(), "{c}::text")


def list_check_sql(column: str) -> str:
    """A boolean that is true where an array value would lose its shape as an Arrow list."""
    return (
        f"({column} IS NOT NULL AND (array_ndims({column}) > 1 "
        f"OR array_lower({column}, 1) <> 1))"
    )


def conform(array: pa.Array, field: pa.Field, source_type: str) -> pa.Array:
    """``array`` as the driver returned it, cast to ``field``'s type; values Arrow
    cannot hold (NaN in NUMERIC(p,s), ±infinity dates, 24:00:00) raise DataError."""
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    target = field.type
    if pa.types.is_timestamp(target) or pa.types.is_date(target):
        _check_finite(array, field, source_type)
    elif pa.types.is_time(target):
        late = pc.greater_equal(array.cast(pa.int64()), _DAY_US)
        if pc.any(late).as_py():
            raise DataError(
                f"column {field.name!r} ({source_type}) holds 24:00:00, which an Arrow "
                "time of day cannot hold; store it as 00:00:00 or change the column to text"
            )
    if array.type.equals(target, check_metadata=True):
        return array
    try:
        return pc.cast(array, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(
            f"column {field.name!r}: a value cannot be read as {source_type} ({target}): {exc}"
        ) from exc


def _check_finite(array: pa.Array, field: pa.Field, source_type: str) -> None:
    if pa.types.is_timestamp(array.type):
        values, floor = array.cast(pa.int64()), _MIN_TIMESTAMP_US
    else:
        values, floor = array.cast(pa.int32()), _MIN_DATE_DAYS
    if pc.any(pc.less(values, floor)).as_py():
        raise DataError(
            f"column {field.name!r} ({source_type}) holds 'infinity' or '-infinity', "
            "which Arrow dates and timestamps cannot hold; replace it with a finite value "
            "or NULL, or change the column to text"
        )


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
