"""The pure parts of splitting a MySQL / MariaDB table: the sampling step, boundaries
from the server's ranks (collation-equal values collapse), the range read's SQL."""

from __future__ import annotations

import pyarrow as pa

from egress.domain.predicate import Condition, Predicate
from egress.domain.ranges import KeyRange
from egress.sources.base import Column, TableInfo
from egress.sources.mysql import MySqlSource, _Plan
from egress.sources.mysql_split import (
    PER_RANGE,
    bounds_from_ranked,
    ranked_query,
    sample_step,
)
from egress.sources.mysql_types import map_type


def test_the_step_keeps_about_per_range_values_per_range() -> None:
    assert sample_step(0, 4) == 1
    assert sample_step(1000, 4) == 1
    assert sample_step(4 * PER_RANGE * 10, 4) == 10
    assert sample_step(4 * PER_RANGE * 10 + 1, 4) == 11


def test_ranked_query_binds_the_step_and_orders_by_the_column_itself() -> None:
    sql = ranked_query("`ev``x`", "t.`id`", "CAST(t.`id` AS DOUBLE)")
    assert "ROW_NUMBER() OVER (ORDER BY t.`id`)" in sql
    assert "DENSE_RANK() OVER (ORDER BY t.`id`)" in sql
    assert "CAST(t.`id` AS DOUBLE) AS k" in sql and "FROM `ev``x` AS t" in sql
    assert sql.count("%s") == 1 and sql.endswith("WHERE MOD(x.n, %s) = 0 ORDER BY x.n")


def test_bounds_are_quantiles_of_the_ranks() -> None:
    ranked = [(str(v), v) for v in range(1, 101)]
    assert bounds_from_ranked(ranked, 4) == ["25", "50", "75"]
    assert bounds_from_ranked([], 4) == []
    assert bounds_from_ranked(ranked, 1) == []


def test_values_equal_in_the_collation_collapse_like_repeats() -> None:
    """'a', 'A' and 'a ' are one value in a case-insensitive PAD SPACE collation (rank 1):
    as bounds they would make an empty range and bounds not strictly increasing."""
    ranked = [("a", 1), ("A", 1), ("a ", 1), ("A", 1), ("b", 2), ("B", 2), ("c", 3), ("d", 4)]
    bounds = bounds_from_ranked(ranked, 4)
    assert bounds == ["a", "b"]  # ranks 1, 1, 2: the repeat collapsed
    # the quantile falls on the second 'A' (rank 1): any spelling of rank 1 is the same
    # bound to the server; the first one seen is given
    assert bounds_from_ranked(ranked, 2) == ["a"]


def _source(columns: list[Column], key: tuple[str, ...]) -> tuple[MySqlSource, TableInfo]:
    source = MySqlSource.__new__(MySqlSource)  # no server: only the query text is built
    mappings = tuple(map_type(c.source_type.split("(")[0], c.source_type, None, None)
                     for c in columns)
    by_name = {c.name: i for i, c in enumerate(columns)}
    source._plans = {"t": _Plan(quoted="`t`", mappings=mappings,
                                key_binds=tuple(mappings[by_name[k]].key_bind for k in key),
                                key_positions=tuple(by_name[k] for k in key))}
    info = TableInfo(name="t", columns=tuple(columns), key_columns=key, row_estimate=None)
    return source, info


def test_a_range_read_binds_its_bounds_on_the_first_key_column() -> None:
    columns = [Column("name", "varchar(40)", pa.string(), False),
               Column("n", "int(11)", pa.int32(), False),
               Column("v", "varchar(10)", pa.string(), True)]
    source, info = _source(columns, ("name", "n"))
    bounds = KeyRange(1, 4, "name", lo="bé", hi="q'; DROP")
    sql, params = source.keyset_query(info, ("c", 7), 100,
                                      Predicate((Condition("v", "=", "x"),), bounds))
    assert "t.`name` > %s AND t.`name` <= %s AND t.`v` = %s" in sql
    assert "DROP" not in sql and "bé" not in sql
    # the cursor first, then the range, then the filter, then the LIMIT
    assert params == ["c", "c", "c", 7, "bé", "q'; DROP", "x", 100]
    sql, params = source.keyset_query(info, None, 10, Predicate((), KeyRange(0, 4, "name",
                                                                               hi="m")))
    assert "WHERE t.`name` <= %s ORDER BY t.`name`, t.`n` LIMIT %s" in sql
    assert params == ["m", 10]
    last = KeyRange(3, 4, "name", lo="m")
    sql, params = source.keyset_query(info, None, 10, Predicate((), last))
    assert "WHERE t.`name` > %s ORDER BY" in sql and params == ["m", 10]


def test_a_range_bound_is_wrapped_like_the_cursor() -> None:
    columns = [Column("d", "time", pa.string(), False)]
    source, info = _source(columns, ("d",))
    sql, params = source.keyset_query(info, ("01:00:00",), 10,
                                      Predicate((), KeyRange(1, 3, "d", "00:10:00", "02:00:00")))
    assert ("t.`d` > CAST(%s AS TIME(6)) AND t.`d` > CAST(%s AS TIME(6)) AND "
            "t.`d` <= CAST(%s AS TIME(6))") in sql
    assert params == ["01:00:00", "00:10:00", "02:00:00", 10]
