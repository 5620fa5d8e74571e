"""Limits on what one row and one page may hold, checked as pages are read.

A single enormous value (a 300 MB text, a blob someone stored by mistake) multiplies as it
is escaped, encoded and compressed: one bad row could take a worker's memory with it. The
reader measures each batch with Arrow (the values' lengths, no copy) and stops with a
permanent error that names the table, the column and the row's key, before anything of
the batch is encoded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from egress.domain.keys import Key
from egress.exceptions import ValueTooLargeError

MiB = 1024 * 1024
#: Defaults (``[export]`` max_value_bytes, max_page_bytes).
MAX_VALUE_BYTES = 64 * MiB
MAX_PAGE_BYTES = 1024 * MiB


@dataclass(frozen=True)
class SizeLimits:
    #: Largest text or binary value one row may hold (bytes).
    max_value_bytes: int = MAX_VALUE_BYTES
    #: Most bytes (as read, in memory) the rows of one part may hold.
    max_page_bytes: int = MAX_PAGE_BYTES


def _sized(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _columns(batch: pa.RecordBatch) -> list[tuple[str, pa.Array]]:
    """The text and binary columns, and those children of SQLite's untyped columns (sparse
    unions: each child as long as the batch, so rows keep their index)."""
    out = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if _sized(column.type):
            out.append((name, column))
        elif pa.types.is_union(column.type) and column.type.mode == "sparse":
            out += [(name, column.field(i)) for i in range(column.type.num_fields)
                    if _sized(column.type.field(i).type)]
    return out


def check_batch(
    batch: pa.RecordBatch, table: str, limits: SizeLimits, key_of: Callable[[int], Key]
) -> None:
    """Raise ValueTooLargeError if a value of ``batch`` exceeds the limit."""
    for name, column in _columns(batch):
        if column.nbytes <= limits.max_value_bytes:
            continue  # a column smaller than the limit in all holds no value above it
        lengths = pc.binary_length(column)
        largest = pc.max(lengths).as_py()
        if largest is not None and largest > limits.max_value_bytes:
            row = pc.index(lengths, largest).as_py()
            raise ValueTooLargeError(
                f"table {table!r}, column {name!r}, the row with key {list(key_of(row))}: a "
                f"value of {largest:,} bytes, above the limit of {limits.max_value_bytes:,} "
                "(export.max_value_bytes); leave the column out (columns) or the row out "
                "(filters), or raise the limit")


def check_page(table: str, page_bytes: int, limits: SizeLimits, first: Key | None,
               last: Key) -> None:
    """Raise ValueTooLargeError if the rows of one part hold more than the limit."""
    if page_bytes > limits.max_page_bytes:
        raise ValueTooLargeError(
            f"table {table!r}: the rows after key {list(first or ())} up to key {list(last)} "
            f"hold {page_bytes:,} bytes, above the limit of {limits.max_page_bytes:,} for one "
            "part (export.max_page_bytes); export with fewer rows per part (part_rows) or "
            "raise the limit")
