"""File names are built by egress: safe, distinct, and deterministic."""

from __future__ import annotations

import pytest

from egress.domain.checkpoint import TaskSpec
from egress.engine.naming import file_name, safe_base_name
from egress.formats import get_compression, make_format


@pytest.mark.parametrize("table", ["events", "Events_2024", "a.b-c"])
def test_safe_names_are_kept(table: str) -> None:
    assert safe_base_name(table) == table


@pytest.mark.parametrize("table", ["a b", "../etc/passwd", "a/b", ".hidden", "日本", "", "a\x00b"])
def test_unsafe_names_are_replaced_and_hashed(table: str) -> None:
    name = safe_base_name(table)
    assert name and "/" not in name and not name.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)
    assert name == safe_base_name(table)  # deterministic


def test_names_that_sanitise_alike_stay_distinct() -> None:
    names = {safe_base_name(t) for t in ("a b", "a_b", "a/b", "a?b")}
    assert len(names) == 4


def spec(max_file_size: int | None = None) -> TaskSpec:
    return TaskSpec(table="t", format="csv", compression="gzip", part_rows=1, base_name="t",
                    max_file_size=max_file_size)


def test_file_names() -> None:
    csv, gz = make_format("csv", {}), get_compression("gzip")
    assert file_name(spec(), 1, csv, gz) == "t.csv.gz"
    assert file_name(spec(1000), 2, csv, gz) == "t-00002.csv.gz"
    parquet = make_format("parquet", {})
    assert file_name(spec(), 3, parquet, get_compression("none")) == "t/part-00003.parquet"
