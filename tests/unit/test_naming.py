"""File names are built by egress: safe, distinct, and deterministic."""

from __future__ import annotations

import pytest

from egress.domain.checkpoint import TaskSpec
from egress.engine.naming import (
    RESERVED_NAMES,
    assert_data_names_allowed,
    file_name,
    output_base_name,
    safe_base_name,
)
from egress.exceptions import ConfigError
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


@pytest.mark.parametrize(
    ("table", "fmt", "compression", "max_file_size"),
    [
        ("manifest", "json", "none", None),  # manifest.json
        ("MANIFEST", "json", "none", None),  # the same file on a case-insensitive file system
        ("manifest.json", "parquet", "none", None),  # a directory named manifest.json
        ("_SUCCESS", "parquet", "zstd", None),  # a directory named _SUCCESS
        ("_success", "parquet", "none", None),
    ],
)
def test_names_egress_writes_itself_are_never_data_files(
    table: str, fmt: str, compression: str, max_file_size: int | None
) -> None:
    format_, comp = make_format(fmt, {}), get_compression(compression)
    base = output_base_name(table, format_, comp, numbered=max_file_size is not None)
    assert base.startswith(safe_base_name(table) + "-")  # the table's name, then a hash
    spec = TaskSpec(table=table, format=fmt, compression=compression, part_rows=1,
                    base_name=base, max_file_size=max_file_size)
    top = file_name(spec, 1, format_, comp).split("/")[0]
    assert top.casefold() not in {n.casefold() for n in RESERVED_NAMES}
    assert base == output_base_name(table, format_, comp, numbered=False)  # deterministic
    assert_data_names_allowed([file_name(spec, 1, format_, comp)])


@pytest.mark.parametrize(
    ("table", "fmt", "compression", "numbered"),
    [("manifest", "csv", "none", False), ("manifest", "json", "gzip", False),
     ("manifest", "json", "none", True), ("_SUCCESS", "csv", "none", False),
     ("egress", "json", "none", False)],
)
def test_names_that_do_not_collide_are_kept(
    table: str, fmt: str, compression: str, numbered: bool
) -> None:
    base = output_base_name(table, make_format(fmt, {}), get_compression(compression),
                            numbered=numbered)
    assert base == table


@pytest.mark.parametrize("name", ["manifest.json", "_SUCCESS", "Manifest.JSON",
                                  "_SUCCESS/part-00001.parquet", ".egress/state.json"])
def test_a_checkpoint_naming_a_reserved_file_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="reserved") as info:
        assert_data_names_allowed(["t.csv", name])
    assert repr(name) in str(info.value) and "manifest.json" in str(info.value)
