"""Parquet parts: each a complete, deterministic file that keeps the Arrow schema."""

from __future__ import annotations

import datetime as dt
import decimal
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egress.formats.parquet import ParquetFormat
from egress.sources.base import LOGICAL_TYPE, SOURCE_TYPE

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False, metadata={SOURCE_TYPE: b"INTEGER"}),
    pa.field("price", pa.decimal128(10, 2)),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("doc", pa.string(), metadata={LOGICAL_TYPE: b"json"}),
    pa.field("any", pa.sparse_union([pa.field("integer", pa.int64()),
                                     pa.field("text", pa.string())])),
])


def batch(n: int) -> pa.RecordBatch:
    any_values = pa.UnionArray.from_sparse(
        pa.array([i % 2 for i in range(n)], pa.int8()),
        [pa.array([i if i % 2 == 0 else None for i in range(n)], pa.int64()),
         pa.array([f"t{i}" if i % 2 else None for i in range(n)], pa.string())],
        field_names=["integer", "text"],
    )
    return pa.record_batch(
        [pa.array(range(n)), pa.array([decimal.Decimal(i) / 4 for i in range(n)],
                                      pa.decimal128(10, 2)),
         pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * n, pa.timestamp("us", tz="UTC")),
         pa.array(['{"a":1}'] * n), any_values],
        schema=SCHEMA,
    )


def encode(fmt: ParquetFormat, batches: list[pa.RecordBatch]) -> bytes:
    enc = fmt.part_encoder(SCHEMA, 0)
    for b in batches:
        enc.add(b)
    return enc.finish()


def test_a_part_is_a_complete_file_with_the_schema() -> None:
    data = encode(ParquetFormat("zstd"), [batch(3), batch(2)])
    table = pq.read_table(io.BytesIO(data))
    assert table.num_rows == 5
    assert table.schema.field("price").type == pa.decimal128(10, 2)
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("id").metadata == {SOURCE_TYPE: b"INTEGER"}
    assert table.schema.field("doc").metadata == {LOGICAL_TYPE: b"json"}
    # Parquet has no union: a value of any storage class is written as its text
    assert table.schema.field("any").type == pa.string()
    assert table.column("any").to_pylist() == ["0", "t1", "2", "0", "t1"]


def test_deterministic() -> None:
    assert encode(ParquetFormat(), [batch(10)]) == encode(ParquetFormat(), [batch(10)])


@pytest.mark.parametrize(("compression", "codec"), [
    ("none", "UNCOMPRESSED"), ("gzip", "GZIP"), ("zstd", "ZSTD"), ("snappy", "SNAPPY"),
])
def test_the_export_compression_picks_the_codec(compression: str, codec: str) -> None:
    meta = pq.ParquetFile(io.BytesIO(encode(ParquetFormat(compression), [batch(4)]))).metadata
    assert meta.row_group(0).column(0).compression == codec


def test_an_empty_part_is_a_valid_empty_file() -> None:
    table = pq.read_table(io.BytesIO(encode(ParquetFormat(), [])))
    assert table.num_rows == 0 and table.column_names == SCHEMA.names
