"""plan_task: everything that decides where parts end is fixed once, from the data."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from egress.engine.plan import plan_task
from egress.exceptions import ConfigError, UnknownNameError
from egress.sources.sqlite import SqliteSource


@pytest.fixture
def source(tmp_path: Path) -> Iterator[SqliteSource]:
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE wide (id INTEGER PRIMARY KEY, pad TEXT)")
    conn.executemany("INSERT INTO wide VALUES (?, ?)", [(i, "x" * 95) for i in range(2000)])
    conn.execute('CREATE TABLE "odd name" (k TEXT PRIMARY KEY, v INTEGER)')
    conn.commit()
    conn.close()
    src = SqliteSource(f"sqlite:///{path}")
    yield src
    src.close()


def test_rows_per_part_come_from_the_encoded_size(source: SqliteSource) -> None:
    info = source.describe("wide")
    spec = plan_task(source, info, format="csv", part_size=100_000)
    # a CSV row is about 100 bytes (id, 95 x, comma, CRLF)
    assert 900 <= spec.part_rows <= 1000
    again = plan_task(source, info, format="csv", part_size=100_000)
    assert again == spec  # deterministic


def test_explicit_part_rows_and_other_settings_are_kept(source: SqliteSource) -> None:
    spec = plan_task(source, source.describe("wide"), format="jsonl", compression="zstd",
                     part_rows=7, max_file_size=1234, min_part_bytes=99)
    assert (spec.part_rows, spec.max_file_size, spec.min_part_bytes) == (7, 1234, 99)
    assert spec.compression == "zstd" and spec.table == "wide" and spec.base_name == "wide"


def test_an_empty_table_gets_a_default(source: SqliteSource) -> None:
    spec = plan_task(source, source.describe("odd name"), format="csv")
    assert spec.part_rows == 10_000
    assert spec.base_name.startswith("odd_name-")


def test_format_options_are_completed(source: SqliteSource) -> None:
    info = source.describe("odd name")
    sql = plan_task(source, info, format="sql", part_rows=1)
    assert sql.format_options == {"dialect": "sqlite", "table": "odd name", "primary_key": ["k"]}
    parquet = plan_task(source, info, format="parquet", compression="zstd", part_rows=1)
    # the layout is recorded: a resume by a later version writes its parts alike
    assert parquet.format_options == {"compression": "zstd", "page_bytes": 2**20,
                                      "page_rows": 20_000, "decimal_as_integer": True,
                                      "dictionary_columns": []}  # (no rows to choose by)
    plain = plan_task(source, info, format="parquet", compression="none", part_rows=1)
    # uncompressed, a decimal(p<=18) stays in its fixed-length bytes: fewer than an INT64
    assert plain.format_options == {"compression": "none", "page_bytes": 2**20,
                                    "page_rows": 1_000_000, "decimal_as_integer": False,
                                    "dictionary_columns": []}
    csv = plan_task(source, info, format="csv", part_rows=1, options={"delimiter": ";"})
    assert csv.format_options == {"delimiter": ";"}


def test_parquet_plans_its_dictionary_columns_from_the_first_rows(
    source: SqliteSource,
) -> None:
    # a task's parts consider for a dictionary only the columns few-valued in its first
    # rows (formats/parquet.py): chosen once, recorded with the plan, so a resumed part
    # chooses alike
    wide = source.describe("wide")
    spec = plan_task(source, wide, format="parquet", part_rows=100)
    assert spec.format_options["dictionary_columns"] == ["pad"]  # one value; keys unique
    assert plan_task(source, wide, format="parquet", part_rows=100, columns=("id",)
                     ).format_options["dictionary_columns"] == []
    assert "dictionary_columns" not in plan_task(source, wide, format="csv").format_options


def test_unknown_names_and_bad_options_are_refused(source: SqliteSource) -> None:
    info = source.describe("wide")
    with pytest.raises(UnknownNameError, match="known: csv, json, jsonl, parquet, sql"):
        plan_task(source, info, format="xml")
    with pytest.raises(UnknownNameError, match="unknown compression 'brotli'"):
        plan_task(source, info, format="csv", compression="brotli")
    with pytest.raises(ConfigError, match="bad options for format 'csv'"):
        plan_task(source, info, format="csv", options={"quote": "'"})
    with pytest.raises(ConfigError, match="CSV delimiter must be one character"):
        plan_task(source, info, format="csv", options={"delimiter": '"'})
