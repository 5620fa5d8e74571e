"""Key ranges of a split table: which rows each range task reads, and how many ranges.

A big table may be planned as several tasks (``split``), each reading the rows whose
FIRST key column lies in ``(lo, hi]``: the first range is open below, the last open
above, so the ranges are disjoint, cover every row and follow each other in key order
(for a composite key too: the rows of one first-column interval are a contiguous run of
the key order). Bounds are values of the key column as the source's cursor holds them;
each source renders them like its cursor, with bound values (``sources/``).

Pure: choosing boundaries from a sample sorted by the source (``quantile_bounds``) and
the number of ranges (``range_count``) need no database.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from egress.domain.keys import KeyValue, decode_value, encode_value
from egress.exceptions import ConfigError

#: Most ranges one table is split into (``split: auto`` stops here; N above is refused).
MAX_RANGES = 64
#: Seqs between two tables' tasks in an export that may be split: a table's ranges take
#: the seqs right after its task's, so that an export's tasks stay in file order.
SEQ_STRIDE = MAX_RANGES
#: What ``split`` accepts, for error messages.
SPLIT_ALLOWED = (f"an integer from 2 to {MAX_RANGES}, \"auto\" (ranges of about split_rows "
                 "rows), or false (one task per table, never split)")


@dataclass(frozen=True)
class KeyRange:
    """Range ``index`` (0-based) of ``count``: rows with ``lo < column <= hi``."""

    index: int
    count: int
    #: The first key column (the cursor's name for it: SQLite's hidden raw key or rowid).
    column: str
    #: None: open (the first range has no ``lo``, the last no ``hi``).
    lo: KeyValue | None = None
    hi: KeyValue | None = None

    @property
    def label(self) -> str:
        """``r01``…: sorts in key order among a table's file names."""
        return f"r{self.index + 1:0{max(2, len(str(self.count)))}d}"

    def describe(self) -> str:
        """``2/4 (100, 250]`` for people (``egress jobs show``)."""
        lo = "-inf" if self.lo is None else repr(self.lo)
        hi = "+inf" if self.hi is None else repr(self.hi)
        return f"{self.index + 1}/{self.count} ({lo}, {hi}]"

    def public(self) -> dict[str, Any]:
        """What users are shown (API, ``egress jobs show --json``): 1-based ``range`` of
        ``of``, the column and the bounds as JSON values (null: open)."""
        return {"range": self.index + 1, "of": self.count, "column": self.column,
                "lo": _shown(self.lo), "hi": _shown(self.hi)}

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index, "count": self.count, "column": self.column,
            "lo": None if self.lo is None else encode_value(self.lo),
            "hi": None if self.hi is None else encode_value(self.hi),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> KeyRange | None:
        if not data:
            return None
        return cls(index=data["index"], count=data["count"], column=data["column"],
                   lo=None if data.get("lo") is None else decode_value(data["lo"]),
                   hi=None if data.get("hi") is None else decode_value(data["hi"]))


def check_split(value: Any) -> int | str | None:
    """The ``split`` option normalised: N (2…64), ``"auto"``, or None (no split)."""
    if value is None or value is False:
        return None
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= MAX_RANGES:
        return value
    raise ConfigError(f"export option split must be {SPLIT_ALLOWED}; got {value!r}")


def range_count(split: int | str | None, estimate: int | None, split_rows: int) -> int:
    """How many ranges to plan: N as asked; ``auto``: one per ``split_rows`` estimated
    rows, at most :data:`MAX_RANGES` (a table under ``split_rows``, or of unknown size,
    is not split: 1)."""
    if split is None:
        return 1
    if split != "auto":
        return int(split)
    if not estimate or estimate <= split_rows:
        return 1
    return min(MAX_RANGES, math.ceil(estimate / max(1, split_rows)))


def quantile_bounds(ordered: Sequence[KeyValue], count: int) -> list[KeyValue]:
    """At most ``count - 1`` boundaries from ``ordered`` (a sample of the key column
    sorted in the source's key order): the values at the 1/count, 2/count… quantiles,
    repeated values collapsed (a range would be empty), so that each range holds about
    the same share of the sample however skewed the key. Strictly increasing in the
    source's order because ``ordered`` is sorted there and repeats are dropped."""
    if count < 2 or not ordered:
        return []
    bounds: list[KeyValue] = []
    n = len(ordered)
    for k in range(1, count):
        value = ordered[min(n - 1, max(0, math.ceil(k * n / count) - 1))]
        if not bounds or value != bounds[-1]:
            bounds.append(value)
    return bounds


def ranges_from_bounds(column: str, bounds: Sequence[KeyValue]) -> list[KeyRange]:
    """``len(bounds) + 1`` ranges: (-inf, b1], (b1, b2], …, (bn, +inf)."""
    edges: list[KeyValue | None] = [None, *bounds, None]
    count = len(bounds) + 1
    return [KeyRange(index=i, count=count, column=column, lo=edges[i], hi=edges[i + 1])
            for i in range(count)]


def _shown(value: KeyValue | None) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return str(value)
