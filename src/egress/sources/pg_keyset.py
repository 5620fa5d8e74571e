"""The keyset query of the PostgreSQL source: ``WHERE key > cursor ORDER BY key LIMIT n``
over the planned select list, with the filters as bound parameters (never SQL text)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.sources.base import TableInfo
from egress.sources.pg_types import PgMapping, filter_text, key_text, list_check_sql
from egress.sources.predicate_sql import render_conditions
from egress.sources.timestamps import instant_text

_INSTANT_TYPES = frozenset({"timestamp with time zone", "timestamp without time zone",
                            "timestamptz", "timestamp"})
_FILTER_TYPMOD = re.compile(r"\(\s*\d+(?:\s*,\s*\d+)?\s*\)")

def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """``text`` as an SQL string literal that reads back as ``text`` whatever the
    server's ``standard_conforming_strings`` (as PostgreSQL's own ``quote_literal``:
    quotes doubled, and with a backslash an ``E''`` string with backslashes doubled)."""
    if "\0" in text:
        raise ValueError("a PostgreSQL text value cannot hold a NUL character")
    quoted = text.replace("'", "''")
    if "\\" in text:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


@dataclass(frozen=True)
class ReadPlan:
    """What ``read`` needs to know about a described table."""

    qualified: str
    mappings: tuple[PgMapping, ...]
    key_types: tuple[str, ...]


def keyset_query(
    table: TableInfo, plan: ReadPlan, after: Key | None, limit: int,
    predicate: Predicate | None = None, params: list[object] | None = None,
    literal: Callable[[str], str] | None = None,
) -> str:
    """The keyset query. Its parameters: the cursor's values, then the filter values
    (appended to ``params``), then the LIMIT. With ``literal`` (which quotes a text
    as an SQL string literal), the cursor's values and the LIMIT are written into the
    query instead and only the filter values are parameters."""
    def col(name: str) -> str:
        # qualified, so that ORDER BY never resolves to a selected ``col::text``
        return "t." + quote_ident(name)

    selects = [
        m.select.format(c=col(c.name)) + " AS " + quote_ident(c.name)
        for c, m in zip(table.columns, plan.mappings, strict=True)
    ]
    selects += [
        list_check_sql(col(c.name)) for c, m in zip(table.columns, plan.mappings, strict=True)
        if m.list_check
    ]
    keys = [col(k) for k in table.key_columns]
    conditions = []
    if after is not None and literal is not None:
        casts = [f"CAST({literal(key_text(v))} AS {t})"
                 for v, t in zip(after, plan.key_types, strict=True)]
    elif after is not None:
        casts = [f"CAST(${i}::text AS {t})" for i, t in enumerate(plan.key_types, 1)]
    if after is not None:
        if len(keys) == 1:
            conditions.append(f"{keys[0]} > {casts[0]}")
        else:
            conditions.append(f"({', '.join(keys)}) > ({', '.join(casts)})")
    bound = params if params is not None else []
    first = 1 if literal is not None else len(after or ()) + 1
    bounds = predicate.key_range if predicate is not None else None
    if bounds is not None:
        # a range task of a split table: its bounds are values of the first key column,
        # written like the cursor (literals in the COPY fast path, else parameters)
        def bound_sql(value: object) -> str:
            if literal is not None:
                return f"CAST({literal(key_text(value))} AS {plan.key_types[0]})"
            bound.append(key_text(value))
            return f"CAST(${first + len(bound) - 1}::text AS {plan.key_types[0]})"

        if bounds.lo is not None:
            conditions.append(f"{keys[0]} > {bound_sql(bounds.lo)}")
        if bounds.hi is not None:
            conditions.append(f"{keys[0]} <= {bound_sql(bounds.hi)}")
    types = {c.name: _FILTER_TYPMOD.sub("", c.source_type) for c in table.columns}

    def bind(column: str, value: object) -> str:
        if types[column] in _INSTANT_TYPES and isinstance(value, str):
            # an instant in UTC (an offset applied, not dropped as a cast to timestamp
            # without time zone would); the session's time zone is UTC
            value = instant_text(value)
        bound.append(filter_text(value))
        # the column's own type (without length/precision, which would round or cut)
        return f"CAST(${first + len(bound) - 1}::text AS {types[column]})"

    conditions += render_conditions(predicate, col, bind, key_range_rendered=True)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    limit_sql = str(int(limit)) if literal is not None else f"${first + len(bound)}"
    return (
        f"SELECT {', '.join(selects)} FROM {plan.qualified} AS t{where} "
        f"ORDER BY {', '.join(keys)} LIMIT {limit_sql}"
    )
