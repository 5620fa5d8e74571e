"""Timestamp filters compare instants on every source: every operator, against a
reference computed in Python, on stored forms that differ as text (a space or a ``T``,
with or without an offset or ``Z``, with or without fractional seconds, a date alone)."""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from pathlib import Path

import psycopg
import pytest

from egress.cli.demo_data import build_demo_db
from egress.engine.selection import check_selection
from egress.sources import open_source
from egress.sources.base import Source

UTC = dt.UTC
OPS = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
       "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _forms(moment: dt.datetime, rnd: random.Random) -> str:
    """One of the ways an application stores ``moment`` (UTC) as SQLite text."""
    frac = moment.microsecond
    choice = rnd.randrange(7)
    if choice == 0:
        return moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{frac:06d}" if frac else "")
    if choice == 1:
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac:06d}" if frac else "") + "Z"
    if choice == 2:
        return moment.isoformat(sep=" ")  # +00:00
    if choice == 3:  # another offset: the same instant, other wall-clock text
        return moment.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).isoformat()
    if choice == 4:
        return moment.astimezone(dt.timezone(-dt.timedelta(hours=8))).isoformat(sep=" ")
    if choice == 5:  # milliseconds only
        return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{frac // 1000:03d}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S")  # T, no offset, no fraction


def _instant(text: str) -> dt.datetime:
    """How egress reads a value: without an offset it is UTC."""
    moment = dt.datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _assert_every_operator(source: Source, moments: list[dt.datetime], where: str) -> None:
    """Every comparison, for every probe, selects the ids Python's comparison selects."""
    for probe in _probes(moments):
        when = _instant(probe)
        for op, test in OPS.items():
            expected = [i for i, m in enumerate(moments) if test(m, when)]
            got = _ids(source, "t", [{"column": "at", "op": op, "value": probe}])
            assert got == expected, (where, probe, op, len(got), len(expected))
        inside = _ids(source, "t", [{"column": "at", "op": "in", "value": [probe]}])
        assert inside == [i for i, m in enumerate(moments) if m == when], (where, probe)


def _ids(source: Source, table: str, filters: list[dict]) -> list[int]:
    info = source.describe(table)
    _, predicate = check_selection(info, None, filters)
    out: list[int] = []
    for batch in source.read(info, None, 100_000, predicate=predicate):
        out += batch.column("id").to_pylist()
    return sorted(out)


def _moments(rnd: random.Random, n: int) -> list[dt.datetime]:
    base = dt.datetime(2023, 1, 20, tzinfo=UTC)
    out = []
    for _ in range(n):
        moment = base + dt.timedelta(seconds=rnd.randrange(-3600, 3600))
        if rnd.random() < 0.5:
            moment = moment.replace(microsecond=rnd.randrange(1000) * 1000)
        out.append(moment)
    return out


def _probes(moments: list[dt.datetime]) -> list[str]:
    """Filter values: stored instants written another way, and instants between them."""
    picked = moments[:6]
    return [
        picked[0].isoformat().replace("+00:00", "Z"),
        picked[1].astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
        picked[2].replace(tzinfo=None).isoformat(sep=" "),
        (picked[3] + dt.timedelta(microseconds=1)).isoformat(),
        "2023-01-20T00:00:00Z",
        "2023-01-20",
    ]


def test_sqlite_timestamp_filters_match_python(tmp_path: Path) -> None:
    rnd = random.Random(14)
    moments = _moments(rnd, 400)
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, at DATETIME)")
    conn.executemany("INSERT INTO t VALUES (?, ?)",
                     [(i, _forms(m, rnd)) for i, m in enumerate(moments)])
    conn.commit()
    conn.close()
    source = open_source(f"sqlite:///{path}")
    try:
        _assert_every_operator(source, moments, "sqlite")
    finally:
        source.close()


def test_the_demo_orders_filter_of_the_report(tmp_path: Path) -> None:
    """The case the issue found: 'placed_at >= 2023-01-20T00:00:00Z' on the demo data."""
    db = build_demo_db(tmp_path / "demo.db", rows=200_000)
    conn = sqlite3.connect(db)
    stored = conn.execute("SELECT id, placed_at FROM orders").fetchall()
    conn.close()
    cut = dt.datetime(2023, 1, 20, tzinfo=UTC)

    source = open_source(f"sqlite:///{db}")
    try:
        got = _ids(source, "orders", [{"column": "placed_at", "op": ">=",
                                       "value": "2023-01-20T00:00:00Z"}])
        assert got == sorted(i for i, text in stored if text and _instant(text) >= cut)
        one_id, one_text = next((i, t) for i, t in stored if t and "+" in t)
        exact = _instant(one_text).isoformat().replace("+00:00", "Z")
        assert one_id in _ids(source, "orders", [{"column": "placed_at", "op": "=",
                                                  "value": exact}])
    finally:
        source.close()


@pytest.mark.parametrize("column_type", ["timestamptz", "timestamp"])
def test_postgres_timestamp_filters_are_instants(pg_url: str, column_type: str) -> None:
    rnd = random.Random(15)
    moments = _moments(rnd, 200)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE t (id int PRIMARY KEY, at {column_type})")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", [
                (i, m if column_type == "timestamptz" else m.replace(tzinfo=None))
                for i, m in enumerate(moments)])
    source = open_source(pg_url)
    try:
        _assert_every_operator(source, moments, column_type)
    finally:
        source.close()
