"""Row filters: a conjunction of simple conditions on columns, as plain JSON values.

A :class:`Predicate` is what an export request may ask besides tables and columns
(``status = 'paid' AND amount >= 10``). Column names are checked against the catalog
before a predicate is stored (``engine/selection.py``); each source renders it with its
own quoting and binds every value as a parameter, so user text never becomes SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from egress.domain.ranges import KeyRange

#: Operators a condition may use, with what they mean.
OPERATORS = {
    "=": "equal to value",
    "!=": "not equal to value (rows where the column is NULL do not match)",
    "<": "less than value",
    "<=": "less than or equal to value",
    ">": "greater than value",
    ">=": "greater than or equal to value",
    "in": "equal to one of the values (a list)",
    "is_null": "the column is NULL (no value)",
    "not_null": "the column is not NULL (no value)",
}
#: Operators that take no value.
UNARY = ("is_null", "not_null")
#: SQL of the binary comparison operators (the same in every dialect egress reads).
COMPARISONS = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

Scalar = str | int | float | bool


@dataclass(frozen=True)
class Condition:
    column: str
    op: str
    #: A scalar; a tuple of scalars for ``in``; None for ``is_null``/``not_null``.
    value: Scalar | tuple[Scalar, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"column": self.column, "op": self.op, "value": value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Condition:
        value = data.get("value")
        return cls(data["column"], data["op"], tuple(value) if isinstance(value, list) else value)


@dataclass(frozen=True)
class Predicate:
    """Every condition must hold (AND), and the first key column must lie in
    ``key_range`` if there is one (a range task of a split table: never stored here,
    added at read time from the task's spec, ``TaskSpec.read_predicate``)."""

    conditions: tuple[Condition, ...]
    key_range: KeyRange | None = None

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.conditions]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]] | None) -> Predicate | None:
        if not data:
            return None
        return cls(tuple(Condition.from_json(c) for c in data))
