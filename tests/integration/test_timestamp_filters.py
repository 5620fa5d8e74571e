"""Timestamp filters compare instants, not texts (issue #9 item 14).

SQLite stores timestamps as text in many forms; the rows a filter keeps must be the
rows whose value, as the source's converter reads it (no offset: UTC), meets the
condition. Every operator is checked against a reference computed in Python, on awkward
stored forms (space or ``T``, with or without an offset, ``Z``, ``±hhmm``, fractional
seconds, a date alone, an hour alone), with filter values in awkward forms too, and
read in small pages as the engine reads them. PostgreSQL binds real instants: a value
with an offset on a ``timestamp`` column is that instant in UTC, not its wall time.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from egress.demo import ORDERS, SCHEMA
from egress.engine.selection import check_selection
from egress.sources import open_source
from egress.sources.base import Source

UTC = dt.UTC
BASE = dt.datetime(2024, 3, 10, tzinfo=UTC)
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _instants(rng: random.Random, n: int) -> list[dt.datetime | None]:
    """Instants close together (many equal to the second, some to the microsecond)."""
    pool = [BASE + dt.timedelta(hours=h) for h in range(-30, 30, 6)]  # incl. midnights
    pool += [BASE + dt.timedelta(seconds=rng.randrange(-7200, 7200),
                                 microseconds=rng.choice([0, 0, 1, 500, 250000, 999999]))
             for _ in range(40)]
    return [None if rng.random() < 0.08 else rng.choice(pool) for _ in range(n)]


def _stored(rng: random.Random, t: dt.datetime) -> str:
    """One of the forms the converter reads, for the instant ``t``."""
    offset = dt.timedelta(minutes=rng.choice([0, 330, -480, 60, -30]))
    local = t.astimezone(dt.timezone(offset))
    sep = rng.choice(" T")
    body = local.strftime(f"%Y-%m-%d{sep}%H:%M:%S")
    if t.microsecond:
        digits = f"{t.microsecond:06d}"
        body += "." + (digits.rstrip("0") if rng.random() < 0.5 else digits)
    elif rng.random() < 0.2:
        body += ".000"
    sign, hhmm = ("-" if offset < dt.timedelta(0) else "+"), abs(offset)
    hh, mm = divmod(int(hhmm.total_seconds()) // 60, 60)
    if offset == dt.timedelta(0):
        suffix = rng.choice(["", "", "Z", "+00:00", "+0000"])
    else:
        suffix = rng.choice([f"{sign}{hh:02d}:{mm:02d}", f"{sign}{hh:02d}{mm:02d}"])
    if t.time() == dt.time(0) and rng.random() < 0.4:
        return t.strftime("%Y-%m-%d")  # a date alone: midnight UTC
    if local.second == 0 and not t.microsecond and rng.random() < 0.4:
        body = local.strftime(f"%Y-%m-%d{sep}%H" + (":%M" if local.minute else ""))
    return body + suffix


def _value_forms(t: dt.datetime) -> list[str]:
    """A filter value for ``t`` written as clients write it."""
    forms = [t.strftime("%Y-%m-%dT%H:%M:%S") + ("." + f"{t.microsecond:06d}" if t.microsecond
                                                   else "") + "Z",
             t.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).isoformat(),
             t.replace(tzinfo=None).isoformat(sep=" ")]
    if t.time() == dt.time(0):
        forms.append(t.date().isoformat())
    return forms


def _read_ids(source: Source, table: str, filters: list[dict[str, Any]],
              page: int = 16) -> list[int]:
    """Ids read in key order by pages of ``page`` rows, as the engine reads them (a short
    page means the end of the table)."""
    info = source.describe(table)
    _, predicate = check_selection(info, None, filters)
    out: list[int] = []
    after = None
    while True:
        got = 0
        for batch in source.read(info, after, page, predicate=predicate):
            got += batch.num_rows
            out += batch.column("id").to_pylist()
            after = tuple(batch.column(k)[-1].as_py() for k in info.key_columns)
        assert got <= page
        if got < page:
            return out


def _check_every_operator(source: Source, table: str, column: str,
                          rows: dict[int, dt.datetime | None], probes: list[dt.datetime]
                          ) -> int:
    checked = 0
    for probe in probes:
        for value in _value_forms(probe):
            for op, test in OPS.items():
                want = [i for i, t in rows.items() if t is not None and test(t, probe)]
                got = _read_ids(source, table, [{"column": column, "op": op, "value": value}])
                assert got == want, (column, op, value)
                checked += 1
    listed = [probes[0], probes[-1], BASE + dt.timedelta(days=400)]
    values = [_value_forms(p)[k % 3] for k, p in enumerate(listed)]
    want = [i for i, t in rows.items() if t in listed]
    assert _read_ids(source, table, [{"column": column, "op": "in", "value": values}]) == want
    between = [{"column": column, "op": ">=", "value": _value_forms(probes[1])[1]},
               {"column": column, "op": "<", "value": _value_forms(probes[-2])[2]},
               {"column": "id", "op": ">", "value": 5}]
    want = [i for i, t in rows.items()
            if t is not None and probes[1] <= t < probes[-2] and i > 5]
    assert _read_ids(source, table, between) == want
    return checked


@pytest.fixture(scope="module")
def awkward_sqlite(tmp_path_factory: pytest.TempPathFactory
                   ) -> tuple[Path, dict[int, dt.datetime | None], list[dt.datetime]]:
    rng = random.Random(20240310)
    instants = _instants(rng, 160)
    path = tmp_path_factory.mktemp("ts") / "ts.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, at DATETIME, atz TIMESTAMPTZ, "
                 "note TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [
        (i, None if t is None else _stored(rng, t), None if t is None else _stored(rng, t),
         f"n{i % 3}")
        for i, t in enumerate(instants, start=1)
    ])
    conn.commit()
    conn.close()
    rows = dict(enumerate(instants, start=1))
    present = sorted({t for t in instants if t is not None})
    probes = [present[0], present[len(present) // 3], BASE, present[-1],
              present[0] - dt.timedelta(microseconds=1), present[-1] + dt.timedelta(days=1)]
    probes += [t for t in present if t.microsecond][:2]
    return path, rows, sorted(set(probes))


def test_sqlite_stored_forms_are_what_the_converter_reads(awkward_sqlite):
    """The fixture is honest: every stored text is a valid form of its instant."""
    path, rows, _ = awkward_sqlite
    source = open_source(f"sqlite:///{path}")
    try:
        info = source.describe("t")
        batches = list(source.read(info, None, 10_000))
        for column, naive in (("at", True), ("atz", False)):
            read = [v for b in batches for v in b.column(column).to_pylist()]
            want = [None if t is None else (t.replace(tzinfo=None) if naive else t)
                    for t in rows.values()]
            assert read == want
        conn = sqlite3.connect(path)
        forms = {r[0] for r in conn.execute("SELECT at FROM t UNION SELECT atz FROM t")}
        conn.close()
        # the awkward forms are all there
        for pattern in ("T", " ", "Z", "+00:00", "+0000", "-08:00", "-0800", "+05:30", "."):
            assert any(f and pattern in f[10:] for f in forms), pattern
        assert any(f and len(f) == 10 for f in forms)  # a date alone
        hour_alone = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d(?:$|Z|[+-])")
        assert any(f and hour_alone.match(f) for f in forms)
    finally:
        source.close()


@pytest.mark.parametrize("column", ["at", "atz"])
def test_sqlite_timestamp_filters_compare_instants(awkward_sqlite, column: str):
    path, rows, probes = awkward_sqlite
    source = open_source(f"sqlite:///{path}")
    try:
        assert _check_every_operator(source, "t", column, rows, probes) >= 100
        # is_null stays a test of the stored value; other conditions still apply in SQL
        assert _read_ids(source, "t", [{"column": column, "op": "is_null"}]) == \
            [i for i, t in rows.items() if t is None]
        assert _read_ids(source, "t", [{"column": column, "op": ">=", "value": "2000-01-01"},
                                       {"column": "note", "op": "=", "value": "n1"}]) == \
            [i for i, t in rows.items() if t is not None and i % 3 == 1]
    finally:
        source.close()


def test_demo_orders_placed_at_counts(tmp_path: Path):
    """The issue's case: the demo's orders, placed_at stored as '2023-01-20 00:00:30+00:00'."""
    path = tmp_path / "demo.db"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.execute(ORDERS, {"count": 60_000, "users": 100, "products": 50})
    conn.commit()
    conn.close()
    placed = {i: dt.datetime(2023, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=30 * i)
              for i in range(1, 60_001)}
    source = open_source(f"sqlite:///{path}")
    try:
        since = dt.datetime(2023, 1, 20, tzinfo=UTC)
        got = _read_ids(source, "orders", [
            {"column": "placed_at", "op": ">=", "value": "2023-01-20T00:00:00Z"}], page=10_000)
        assert got == [i for i, t in placed.items() if t >= since]
        assert len(got) == 60_000 - 54_720 + 1
        got = _read_ids(source, "orders", [
            {"column": "placed_at", "op": "=", "value": "2023-01-20T00:00:30Z"}], page=10_000)
        assert got == [54_721]
    finally:
        source.close()


@pytest.mark.postgres
def test_postgres_timestamp_filters_bind_instants(pg_url: str):
    rng = random.Random(7)
    instants = _instants(rng, 120)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'Asia/Kolkata'")  # the client's zone must not matter
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, at timestamp(6), atz timestamptz, "
                     "note text)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s)", [
                (i, None if t is None else t.replace(tzinfo=None), t, f"n{i % 3}")
                for i, t in enumerate(instants, start=1)])
    rows = dict(enumerate(instants, start=1))
    present = sorted({t for t in instants if t is not None})
    probes = sorted({present[0], present[len(present) // 2], present[-1], BASE,
                     present[-1] + dt.timedelta(microseconds=1)})
    source = open_source(pg_url)
    try:
        for column in ("at", "atz"):
            assert _check_every_operator(source, "t", column, rows, probes) >= 60
    finally:
        source.close()


def test_date_filter_values_in_any_iso_form(tmp_path: Path, pg_url_or_none: str | None):
    """A date value is a date: '20240131' (ISO's basic form) is 2024-01-31, on SQLite (which
    would compare the text) and on PostgreSQL (bound as a date)."""
    path = tmp_path / "d.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, d DATE)")
    days = {i: dt.date(2024, 1, 25) + dt.timedelta(days=i) for i in range(1, 15)}
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, d.isoformat()) for i, d in days.items()])
    conn.commit()
    conn.close()
    urls = [f"sqlite:///{path}"]
    if pg_url_or_none:
        with psycopg.connect(pg_url_or_none, autocommit=True) as pg:
            pg.execute("CREATE TABLE t (id int PRIMARY KEY, d date)")
            with pg.cursor() as cur:
                cur.executemany("INSERT INTO t VALUES (%s, %s)", list(days.items()))
        urls.append(pg_url_or_none)
    for url in urls:
        source = open_source(url)
        try:
            for op, test in OPS.items():
                want = [i for i, d in days.items() if test(d, dt.date(2024, 1, 31))]
                assert _read_ids(source, "t", [{"column": "d", "op": op,
                                                "value": "20240131"}]) == want, (url, op)
            assert _read_ids(source, "t", [{"column": "d", "op": "in",
                                            "value": ["20240201", "2024-02-03"]}]) == [7, 9]
        finally:
            source.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def pg_url_or_none(request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("pg_url") if request.param == "postgresql" else None
