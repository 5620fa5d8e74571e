"""Splitting a table into key ranges: counts, boundaries, options, names (real SQLite)."""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from egress.domain.checkpoint import TaskSpec
from egress.domain.predicate import Predicate
from egress.domain.ranges import (
    MAX_RANGES,
    KeyRange,
    check_split,
    quantile_bounds,
    range_count,
    ranges_from_bounds,
)
from egress.engine.naming import file_name
from egress.engine.split import check_split_export, plan_ranges
from egress.exceptions import ConfigError
from egress.formats import get_compression, make_format
from egress.sources.sqlite import SqliteSource


def _skewed_keys(n: int, seed: int = 7) -> list[int]:
    """Distinct keys, most of them packed at the low end: a long sparse tail."""
    rng = random.Random(seed)
    keys: set[int] = set()
    while len(keys) < n:
        keys.add(int(rng.paretovariate(0.6) * 1000))
    return sorted(keys)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[SqliteSource]:
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE skewed (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO skewed VALUES (?, ?)",
                     [(k, f"v{k}") for k in _skewed_keys(20_000)])
    conn.execute("CREATE TABLE words (w TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID")
    conn.executemany("INSERT INTO words VALUES (?, ?)",
                     [(f"w{i:05d}", i) for i in range(3000)])
    conn.execute("CREATE TABLE pair (a INTEGER, b INTEGER, PRIMARY KEY (a, b))")
    conn.executemany("INSERT INTO pair VALUES (?, ?)",
                     [(i // 10, i % 10) for i in range(4000)])
    conn.execute("CREATE TABLE stamps (t DATETIME PRIMARY KEY, n INTEGER)")
    start = dt.datetime(2024, 1, 1)
    conn.executemany("INSERT INTO stamps VALUES (?, ?)",
                     [((start + dt.timedelta(seconds=i * i)).isoformat(sep=" "), i)
                      for i in range(2000)])
    conn.execute("CREATE TABLE nopk (v TEXT)")  # read by rowid
    conn.executemany("INSERT INTO nopk (rowid, v) VALUES (?, ?)",
                     [(k, f"v{k}") for k in _skewed_keys(3000, seed=9)])
    conn.execute("CREATE TABLE one (id INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO one VALUES (1)")
    conn.execute("CREATE TABLE empty (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    src = SqliteSource(f"sqlite:///{path}")
    yield src
    src.close()


def _read_range(source: SqliteSource, table: str, key_range: KeyRange) -> list[tuple]:
    info = source.describe(table)
    rows: list[tuple] = []
    after = None
    while True:
        batches = list(source.read(info, after, 700, predicate=Predicate((), key_range)))
        page = [tuple(r.values()) for b in batches for r in b.to_pylist()]
        if not page:
            return rows
        rows += page
        last = batches[-1]
        after = tuple(last.column(k)[last.num_rows - 1].as_py() for k in info.key_columns)


def _whole(source: SqliteSource, table: str) -> list[tuple]:
    return _read_range(source, table, KeyRange(0, 1, "x"))


def test_quantiles_of_a_skewed_sample_give_ranges_of_similar_counts() -> None:
    keys = _skewed_keys(10_000)
    # most keys are small: equal-width ranges would put nearly all rows in the first
    assert sum(k <= (keys[0] + keys[-1]) / 4 for k in keys) > 0.9 * len(keys)
    bounds = quantile_bounds(keys, 4)
    assert len(bounds) == 3 and bounds == sorted(set(bounds))
    counts = [sum(lo < k <= hi for k in keys) for lo, hi in zip(
        [float("-inf"), *bounds], [*bounds, float("inf")], strict=True)]
    assert sum(counts) == len(keys)
    assert max(counts) - min(counts) <= 2


def test_repeated_boundaries_collapse_into_fewer_ranges() -> None:
    assert quantile_bounds([1, 1, 1, 1, 1, 1, 2], 4) == [1]
    assert quantile_bounds([5] * 100, 8) == [5]
    assert quantile_bounds([], 4) == []
    ranges = ranges_from_bounds("id", [10, 20])
    assert [(r.lo, r.hi) for r in ranges] == [(None, 10), (10, 20), (20, None)]
    assert [r.label for r in ranges] == ["r01", "r02", "r03"]


def test_the_split_option_names_what_is_allowed() -> None:
    assert check_split(4) == 4 and check_split("auto") == "auto"
    assert check_split(False) is None and check_split(None) is None
    for bad in (1, 0, MAX_RANGES + 1, True, "4", "all", 2.5):
        with pytest.raises(ConfigError, match=r"integer from 2 to 64.*auto.*false"):
            check_split(bad)


def test_auto_splits_only_tables_above_split_rows() -> None:
    assert range_count("auto", 9_000_000, 10_000_000) == 1
    assert range_count("auto", None, 10_000_000) == 1
    assert range_count("auto", 25_000_000, 10_000_000) == 3
    assert range_count("auto", 10**12, 10_000_000) == MAX_RANGES
    assert range_count(5, 10, 10_000_000) == 5
    assert range_count(None, 10**12, 1) == 1


def test_split_is_refused_where_it_cannot_be_honoured() -> None:
    with pytest.raises(ConfigError, match="not to a query"):
        check_split_export(4, kind="sqlite", query=True, remote=False, options={})
    with pytest.raises(ConfigError, match="SQLite, PostgreSQL, DuckDB and MySQL/MariaDB "
                                          "tables; this source is trino"):
        check_split_export(4, kind="trino", query=False, remote=True, options={})
    check_split_export("auto", kind="mysql", query=False, remote=False, options={})
    check_split_export(3, kind="mariadb", query=False, remote=False, options={})
    check_split_export("auto", kind="duckdb", query=False, remote=False, options={})
    with pytest.raises(ConfigError, match="csv_dialect postgres"):
        check_split_export(2, kind="postgresql", query=False, remote=False,
                           options={"csv_dialect": "postgres"})
    check_split_export(None, kind="trino", query=True, remote=True, options={})


def test_key_range_round_trips_through_json() -> None:
    r = KeyRange(2, 12, "created_at", dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC), None)
    assert KeyRange.from_json(r.to_json()) == r
    assert r.label == "r03" and r.public()["hi"] is None and r.public()["range"] == 3
    assert KeyRange.from_json(None) is None
    spec = TaskSpec(table="t", format="csv", compression="none", part_rows=10,
                    base_name="t", key_range=KeyRange(0, 2, "id", None, 5))
    assert TaskSpec.from_json(spec.to_json()) == spec
    assert "key_range" not in TaskSpec(table="t", format="csv", compression="none",
                                       part_rows=10, base_name="t").to_json()


def test_range_files_sort_in_key_order() -> None:
    csv, none = make_format("csv", {}), get_compression("none")
    base = TaskSpec(table="events", format="csv", compression="none", part_rows=10,
                    base_name="events")
    names = []
    for r in ranges_from_bounds("id", [1, 2]):
        spec = TaskSpec(**{**base.__dict__, "key_range": r})
        names += [file_name(spec, i, csv, none) for i in (1, 2)]
    assert names[:2] == ["events.r01-00001.csv", "events.r01-00002.csv"]
    assert names == sorted(names)
    parquet = make_format("parquet", {})
    spec = TaskSpec(**{**base.__dict__, "key_range": KeyRange(1, 3, "id", 1, 2)})
    assert file_name(spec, 1, parquet, none) == "events/part-r02-00001.parquet"
    assert file_name(base, 1, csv, none) == "events.csv"  # unsplit: as before


@pytest.mark.parametrize("table,count", [("skewed", 4), ("words", 5), ("pair", 3),
                                         ("stamps", 4), ("nopk", 4)])
def test_sqlite_ranges_are_disjoint_complete_in_order_and_balanced(
        source: SqliteSource, table: str, count: int) -> None:
    info = source.describe(table)
    ranges = plan_ranges(source, info, count, 10_000_000)
    assert ranges is not None and len(ranges) == count
    bounds = [r.hi for r in ranges[:-1]]
    whole = _whole(source, table)
    parts = [_read_range(source, table, r) for r in ranges]
    assert [row for part in parts for row in part] == whole  # every row once, in key order
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= max(2, len(whole) // 50), sizes
    assert len(set(map(repr, bounds))) == len(bounds)


def test_tables_too_small_or_empty_are_not_split(source: SqliteSource) -> None:
    assert plan_ranges(source, source.describe("empty"), 4, 10) is None
    assert plan_ranges(source, source.describe("one"), "auto", 10) is None  # under split_rows
    one = plan_ranges(source, source.describe("one"), 4, 10)
    assert one is None or len(one) <= 2


def test_a_one_shot_export_refuses_split(tmp_path: Path) -> None:
    import egress

    path = tmp_path / "s.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigError, match=r"split needs workers.*jobs create --split"):
        egress.export(f"sqlite:///{path}", ["t"], to=tmp_path / "out", options={"split": 4})
    assert not (tmp_path / "out").exists()


def test_postgres_range_bounds_keep_the_copy_fast_path_and_bind_otherwise() -> None:
    """Unfiltered: the bounds are literals like the cursor (no parameter: the driver
    streams a binary COPY); with a filter, they are parameters cast to the key's type."""
    import pyarrow as pa

    from egress.domain.predicate import Condition
    from egress.sources.base import Column, TableInfo
    from egress.sources.pg_keyset import ReadPlan, keyset_query
    from egress.sources.pg_types import PgMapping

    info = TableInfo("t", (Column("at", "timestamp with time zone", pa.timestamp("us", "UTC")),
                           Column("k", "text", pa.string())), key_columns=("at",))
    plan = ReadPlan('"public"."t"', (PgMapping(pa.timestamp("us", "UTC")),
                                     PgMapping(pa.string())), ("timestamp with time zone",))
    bounds = KeyRange(1, 3, "at", "2024-01-01 00:00:00+00", "2024-02-01 00:00:00+00")

    def literal(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    fast = keyset_query(info, plan, None, 100, Predicate((), bounds), [], literal)
    assert "$" not in fast
    assert ("t.\"at\" > CAST('2024-01-01 00:00:00+00' AS timestamp with time zone) AND "
            "t.\"at\" <= CAST('2024-02-01 00:00:00+00' AS timestamp with time zone)") in fast
    params: list[object] = []
    bound = keyset_query(info, plan, ("2024-01-05 00:00:00+00",), 100,
                         Predicate((Condition("k", "=", "x"),), bounds), params)
    assert params == ["2024-01-01 00:00:00+00", "2024-02-01 00:00:00+00", "x"]
    assert "CAST($2::text AS timestamp with time zone)" in bound and "LIMIT $5" in bound


def test_which_exports_split_and_how() -> None:
    from egress.engine.split import SplitAsked, split_asked

    # no split option: the quiet default (stitched or nothing) where a stitch can apply
    assert split_asked({}, "sqlite") == SplitAsked("auto", "quiet")
    assert split_asked({}, "postgresql") == SplitAsked("auto", "quiet")
    assert split_asked({}, "sqlite", auto_split=False) is None
    assert split_asked({}, "duckdb") == split_asked({}, "mysql") == SplitAsked("auto", "quiet")
    assert split_asked({}, "trino") is None  # a remote engine: never split
    assert split_asked({"max_file_size": 10}, "sqlite") is None
    assert split_asked({"split": False}, "sqlite") is None
    assert split_asked({"query": {"sql": "SELECT 1"}}, "sqlite") is None
    assert split_asked({"csv_dialect": "postgres"}, "postgresql") is None
    assert split_asked({}, "trino", remote=True) is None
    # asked for: as asked
    assert split_asked({"split": 4}, "sqlite") == SplitAsked(4, "auto")
    assert split_asked({"split": 4}, "sqlite", auto_split=False) == SplitAsked(4, "auto")
    assert split_asked({"split": 4, "split_files": True}, "sqlite") == SplitAsked(4, "files")
    assert split_asked({"split": 4, "split_files": False}, "sqlite") == SplitAsked(
        4, "stitched")
    assert split_asked({"split": "auto"}, "duckdb") == SplitAsked("auto", "auto")
    assert split_asked({"split": "auto"}, "trino") == SplitAsked("auto", "files")
    assert split_asked({"split": 4, "max_file_size": 10}, "sqlite") == SplitAsked(4, "files")


def test_the_request_refuses_from_the_catalog_what_planning_would(tmp_path: Path) -> None:
    from egress.engine.split import SplitAsked, check_splittable

    db = tmp_path / "k.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE pairs (a INTEGER, b INTEGER, PRIMARY KEY (a, b))")
    conn.execute("CREATE TABLE one (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    src = SqliteSource(f"sqlite:///{db}")
    try:
        pairs, one = src.describe("pairs"), src.describe("one")
    finally:
        src.close()
    with pytest.raises(ConfigError, match="one-column key"):
        check_splittable(pairs, SplitAsked(2, "stitched"), 10, filtered=False)
    with pytest.raises(ConfigError, match="filters"):
        check_splittable(one, SplitAsked(2, "stitched"), 10, filtered=True)
    check_splittable(pairs, SplitAsked(2, "files"), 10, filtered=True)
    check_splittable(pairs, SplitAsked(2, "quiet"), 10, filtered=False)  # then not split


def test_auto_counts_ranges_from_the_exact_rows_not_the_estimate(tmp_path: Path) -> None:
    """SQLite estimates a table with a sparse key by its largest rowid: 30,000 rows with
    ids up to 10^12 read as ~10^12 rows. ``auto`` decides from the exact count that the
    stitched planner takes anyway: not split under split_rows, ceil(rows / split_rows)
    ranges above it."""
    from egress.engine.plan import plan_task
    from egress.engine.split import SplitAsked, plan_split

    db = tmp_path / "sparse.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    rng = random.Random(1)
    conn.executemany("INSERT INTO t VALUES (?, 'x')",
                     ((k,) for k in sorted(rng.sample(range(10**12), 30_000))))
    conn.commit()
    conn.close()
    src = SqliteSource(f"sqlite:///{db}")
    try:
        info = src.describe("t")
        assert info.row_estimate is not None and info.row_estimate > 10**9
        spec = plan_task(src, info, format="csv", compression="gzip", part_size=0,
                         part_rows=1000)
        for layout in ("quiet", "auto"):
            asked = SplitAsked("auto", layout)
            assert plan_split(src, info, spec, asked, split_rows=10_000_000, part_size=0,
                              max_parts=None) is None
            planned = plan_split(src, info, spec, asked, split_rows=8000, part_size=0,
                                 max_parts=None)
            assert planned is not None and len(planned) == 4, planned
            # each stitched range's rows, counted exactly from its boundaries (the ETA)
            counts = [rows for _, _, rows in planned]
            assert sum(counts) == 30_000 and all(c and c % 1000 == 0 for c in counts), counts
    finally:
        src.close()
